"""One model of an LMI Neuron release's start-up (issue 21, Deliver 1): from the artifact's
serving.properties, its files and the serving profile, what the release does with it - the keys it
resolves (the Java recommender's rolling batch, the batch sizes, on_device_embedding, the flags
string), the loader DJL picks, DJL's and transformers-neuronx's validators, and the outcome:
``loads`` (which NEFFs), ``recompiles`` (why) or ``rejected`` (DJL's message).

``evaluate`` composes the target's existing checks, in the order start-up meets them; each is
still defined once, in its own module, and cited in the data it reads:

- options lmi-build's driver does not build (``sdk.refused_options``, ``neuron_sdk.toml``);
- the batching keys as the release reads them (``batching``; ``rolling_batch_sources``);
- the loader DJL picks (``serving.choose_loader``; ``neuron_sdk.toml`` [startup] loader_sources);
- the context estimates DJL refuses under continuous batching (``continuous_batching_contexts_sources``);
- an s3:// compiled_graph_path the release model.load()s (``compiled_graph_path_sources``);
- 0.27's split layout without a TNX sampling class (``split_classes``);
- RoPE scaling (``rope``; ``rope_scaling_sources``);
- on_device_embedding as the release passes it against the NEFFs' (``on_device_embedding_sources``);
- the flags string against the NEFFs' (the compile cache's key; ``cache_flags_sources``).

``plan`` evaluates it on the artifact it will write (``from_planned``) and ``verify --for-container``
on the artifact's manifest (``from_manifest``): the same rules on the same kind of input. Each rule
with an effect other than ``resolves`` is a plan/verify message whose code is the rule's id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmi_build.artifact.packager import written_properties
from lmi_build.core.errors import shown_values
from lmi_build.model.spec import ModelSpec
from lmi_build.planning.context import handler_options, read_text, read_written
from lmi_build.planning.startup import RuleFinding, StartupOutcome
from lmi_build.targets.neuronx.batching import batching_problem, container_batching
from lmi_build.targets.neuronx.layouts import tnx_properties
from lmi_build.targets.neuronx.options import NeuronxOptions
from lmi_build.targets.neuronx.rope import rope_message, rope_outcome
from lmi_build.targets.neuronx.sdk import refused_option_message, sdk
from lmi_build.targets.neuronx.serving import (
    LoaderRefused,
    choose_loader,
    container_on_device_embedding,
    contexts_refusal,
    continuous_batching,
    serving_compiler_flags,
)

if TYPE_CHECKING:
    from lmi_build.artifact.manifest import Manifest
    from lmi_build.targets.neuronx.knobs import NeuronxBuild
    from lmi_build.targets.neuronx.profiles import NeuronProfile

PRECOMPILED = ("neuronx-tnx", "neuronx-legacy", "neuronx-split")  # TNX loads compiled/ by HLO hash
CACHE_LAYOUT = "neuronx-cache"
OPTIMUM_LAYOUT = "neuronx-optimum"


@dataclass(frozen=True)
class StartupInputs:
    """An artifact as the release's start-up sees it, from a manifest or from a plan."""

    properties: Mapping[str, str]  # serving.properties, full keys
    layout: str
    spec: ModelSpec | None
    batch_size: int | None  # the batch the NEFFs were compiled for
    on_device_embedding: bool | None  # the NEFFs' NeuronConfig
    compiler_flags: str | None  # the flags string the NEFFs were compiled with
    built_loader: str | None = None  # the DJL loader the artifact was built for (the plan's)
    neffs: tuple[str, ...] | None = None  # the NEFF files the artifact holds; None: not built yet (plan)
    served_flags: str | None = None  # the container's flags string when known otherwise (verify --neuron-cc-flags)
    container_flags: str | None = None  # the container's NEURON_CC_FLAGS, where not the profile's (plan: the env)
    continuous_batching: bool | None = None  # whether the NEFFs were compiled for TNX continuous batching


def from_manifest(manifest: Manifest, served_flags: str | None = None) -> StartupInputs:
    """The inputs of a built artifact: its serving.properties, the plan and file list its manifest records."""
    plan = manifest.plan
    build = plan.get("build") or {}
    config = build.get("neuron_config")
    recorded = plan.get("spec")
    batch = build.get("batch_size")
    flags = build.get("compiler_flags")
    return StartupInputs(
        properties=dict(manifest.serving_properties), layout=manifest.layout,
        spec=ModelSpec.model_validate(recorded) if isinstance(recorded, dict) else None,
        batch_size=batch if isinstance(batch, int) else None,
        on_device_embedding=bool(config.get("on_device_embedding")) if isinstance(config, dict) else None,
        compiler_flags=flags if isinstance(flags, str) else None,
        built_loader=build.get("loader") if isinstance(build.get("loader"), str) else None,
        neffs=tuple(sorted(f.path for f in manifest.files if f.path.endswith(".neff"))),
        served_flags=served_flags,
        continuous_batching=build["continuous_batching"] if isinstance(build.get("continuous_batching"), bool) else None)


def from_planned(options: Mapping[str, str], sources: Mapping[str, str], build: NeuronxBuild, spec: ModelSpec,
                 container_flags: str) -> StartupInputs:
    """The inputs of the artifact a plan will write: the planned options that serving.properties
    carries (``packager.written_properties``) and the layout's keys (``layouts.tnx_properties``),
    with the knobs the NEFFs will be compiled with."""
    properties = written_properties(options, sources, "neuronx")
    properties.update(tnx_properties(build, (read_text(options, NeuronxOptions).rolling_batch or "disable") != "disable"))
    return StartupInputs(properties=properties, layout=build.layout, spec=spec, batch_size=build.batch_size,
                         on_device_embedding=bool(build.neuron_config.get("on_device_embedding")),
                         compiler_flags=build.compiler_flags, built_loader=build.loader,
                         container_flags=container_flags, continuous_batching=build.continuous_batching)


def evaluate(profile: NeuronProfile, facts: StartupInputs) -> StartupOutcome:
    """What ``profile``'s release does at start-up with the artifact ``facts`` describe."""
    rules: list[RuleFinding] = []
    resolved: dict[str, str] = {}
    rules += _refused_options(facts)
    reading = _batching(profile, facts, rules, resolved)
    loader = _loader(profile, facts, reading.rolling_batch, rules)
    if loader is not None:
        resolved["model_loader"] = loader
    continuous = _contexts(profile, facts, reading, rules)
    resolved["continuous_batching"] = str(continuous).lower()
    rules += _compiled_graph_path(profile, facts)
    rules += _split_class(profile, facts)
    rules += _rope(profile, facts)
    rules += _embedding(profile, facts, resolved)
    rules += _flags(profile, facts, resolved)
    effects = {rule.effect for rule in rules}
    outcome = "rejected" if "rejected" in effects else "recompiles" if "recompiles" in effects else "loads"
    return StartupOutcome(profile=profile.name, outcome=outcome, loader=loader, resolved=resolved,
                          loads=(facts.neffs or ()) if outcome == "loads" else (), rules=tuple(rules))


# -- the rules, in the order start-up meets them ---------------------------------------------------

def _refused_options(facts: StartupInputs) -> list[RuleFinding]:
    found = []
    for key, refused in sdk().refused_options.items():
        if facts.properties.get(key):
            message = refused_option_message(key, refused)
            found.append(RuleFinding(rule=message.code, effect="recompiles", message=message.message,
                                     sources=refused.sources, hint=message.hint))
    return found


def _batching(profile: NeuronProfile, facts: StartupInputs, rules: list[RuleFinding],
              resolved: dict[str, str]) -> Any:
    reading = container_batching(facts.properties, profile)
    resolved.update(rolling_batch=reading.rolling_batch, server_batch_size=str(reading.server_batch),
                    neff_batch_size="chosen at start-up" if reading.neff_batch is None else str(reading.neff_batch))
    rules.append(RuleFinding(rule="neuron_rolling_batch", effect="resolves", message=reading.why,
                             sources=profile.rolling_batch_sources))
    if facts.batch_size is None:
        return reading
    found = batching_problem(reading, facts.batch_size)
    if found is None:
        return reading
    kind, problem = found
    hint = "write the batching the NEFFs were compiled for (option.rolling_batch included), or rebuild"
    sources = profile.rolling_batch_sources
    if kind == "refused":
        effect = "rejected"
    elif kind == "server_batch":
        effect, sources = "degrades", (*sdk().startup.server_batch_sources,)
    elif facts.layout == CACHE_LAYOUT:
        effect = "recompiles"  # a graph the compile cache does not hold is compiled
    else:
        effect = "rejected"
        sources = (*sources, *(sdk().startup.optimum_block_sources if facts.layout == OPTIMUM_LAYOUT
                               else sdk().startup.neff_lookup_sources))
    rules.append(RuleFinding(rule="neuron_batching", effect=effect, message=f"{profile.name}: {problem}",
                             sources=sources, hint=hint))
    return reading


def _loader(profile: NeuronProfile, facts: StartupInputs, rolling_batch: str, rules: list[RuleFinding]) -> str | None:
    """The loader DJL picks from serving.properties (``serving.choose_loader``); DJL's refusal of it, a
    loader that compiles at start-up whatever the artifact holds (``neuron_sdk.toml`` [unbuilt_loaders]
    startup), or a loader that is not the one the artifact's layout was built for."""
    if facts.spec is None:
        return None
    options = handler_options(facts.properties)
    if options.get("quantize") == "static_int8":
        options["load_in_8bit"] = "true"  # DJL's set_quantize validator (0.26.0-dlc tnx_properties.py:150-154)
    sources = sdk().startup.loader_sources
    try:
        loader = choose_loader(profile, model_type=facts.spec.model_type, rolling=rolling_batch != "disable",
                               options=options, rolling_batch=rolling_batch)
    except LoaderRefused as refused:
        rules.append(RuleFinding(rule="neuron_model_loader", effect="rejected", message=str(refused),
                                 sources=sources, hint=refused.hint))
        return None
    unbuilt = sdk().unbuilt_loaders.get(loader)
    if unbuilt is not None and unbuilt.startup and rolling_batch == unbuilt.startup_rolling_batch:
        rules.append(RuleFinding(
            rule="neuron_loader_compiles", effect="recompiles",
            message=f"{profile.name}: option.model_loader={loader} with option.rolling_batch={rolling_batch}: "
                    f"{unbuilt.startup} ({'; '.join(unbuilt.startup_sources)})",
            sources=unbuilt.startup_sources, hint=unbuilt.startup_hint))
        return loader
    wanted = facts.built_loader
    if wanted is not None and loader != wanted:
        rules.append(RuleFinding(
            rule="neuron_model_loader", effect="recompiles",
            message=f"{profile.name} loads this serving.properties with its {loader} loader, the artifact is "
                    f"{facts.layout}, built for the {wanted} loader: it is not loaded as compiled (what the "
                    f"{loader} loader makes of the tree is inferred)",
            sources=sources, hint="serve with the serving.properties the artifact ships, or rebuild"))
    return loader


def _contexts(profile: NeuronProfile, facts: StartupInputs, reading: Any, rules: list[RuleFinding]) -> bool:
    """Continuous batching as the release decides it, and DJL's refusal of a given context estimate
    under it (``serving.contexts_refusal``, the rule plan applies)."""
    if facts.spec is None or reading.neff_batch is None:
        return False
    continuous = continuous_batching(profile, rolling=reading.rolling, batch=reading.neff_batch,
                                     model_type=facts.spec.model_type,
                                     rolling_batch=reading.rolling_batch)
    if facts.continuous_batching is not None and continuous != facts.continuous_batching:
        # Another NeuronConfig (continuous_batching) and other n_positions/context estimates: another HLO,
        # so TNX's lookup of the shipped NEFFs by hash fails (set_neff_bytes: FileNotFoundError).
        cache = facts.layout == CACHE_LAYOUT
        rules.append(RuleFinding(
            rule="neuron_continuous_batching", effect="recompiles" if cache else "rejected",
            message=f"{profile.name} compiles with continuous batching {'on' if continuous else 'off'} "
                    f"(option.rolling_batch={reading.rolling_batch}), the NEFFs were compiled with it "
                    f"{'on' if facts.continuous_batching else 'off'}: another graph, which "
                    + ("the compile cache does not hold" if cache else
                       "transformers-neuronx does not find among the shipped NEFFs (set_neff_bytes: FileNotFoundError)"),
            sources=(*profile.vllm_continuous_batching_sources, *profile.continuous_batching_contexts_sources),
            hint="serve with the serving.properties the artifact ships, or rebuild with this option.rolling_batch"))
    written = read_text(facts.properties, NeuronxOptions)
    text, top = written.context_length_estimate, written.n_positions or ""
    if not continuous or not text or not top.isdigit():
        return continuous
    given = read_written(facts.properties, NeuronxOptions).context_length_estimate  # None: does not parse
    bsh = written.cache_layout == "BSH"
    refusal = contexts_refusal(profile, list(given), int(top), bsh) if given else None
    if refusal is not None and given is not None:
        rules.append(RuleFinding(
            rule="context_length_estimate", effect="rejected",
            message=f"{profile.name} refuses context_length_estimate {shown_values(given)} under continuous batching: "
                    f"{refusal} ({'; '.join(profile.continuous_batching_contexts_sources)})",
            sources=profile.continuous_batching_contexts_sources,
            hint="drop --context-length-estimate, or turn rolling batch off"))
    return continuous


def _compiled_graph_path(profile: NeuronProfile, facts: StartupInputs) -> list[RuleFinding]:
    graph = read_text(facts.properties, NeuronxOptions).compiled_graph_path or ""
    if not graph.startswith("s3://") or profile.compiled_graph_path_s3 != "rejected":
        return []
    return [RuleFinding(rule="compiled_graph_path_rejected", effect="rejected",
                        message=f"{profile.name} would model.load() {graph} itself, which transformers-neuronx "
                                f"refuses as a missing directory ({'; '.join(profile.compiled_graph_path_sources)})",
                        sources=profile.compiled_graph_path_sources,
                        hint="drop option.compiled_graph_path (the precompiled layout), or pick lmi-0.28.0 or newer")]


def _split_class(profile: NeuronProfile, facts: StartupInputs) -> list[RuleFinding]:
    if facts.layout != "neuronx-split" or facts.spec is None or facts.spec.model_type in sdk().split_classes:
        return []
    return [RuleFinding(rule="neuron_split_class", effect="rejected",
                        message=f"{profile.name} has no transformers-neuronx sampling class for {facts.spec.model_type}",
                        sources=profile.sources,
                        hint="pick lmi-0.28.0 or newer (lmi-build profiles list)")]


def _rope(profile: NeuronProfile, facts: StartupInputs) -> list[RuleFinding]:
    if facts.spec is None:
        return []
    found = rope_outcome(profile, facts.spec)
    shown = rope_message(profile, facts.spec)
    if found is None or shown is None:
        return []
    effect = {"rejected": "rejected", "unscaled": "degrades", "unchecked": "warning"}[found.outcome]
    _, message = shown
    return [RuleFinding(rule=message.code, effect=effect, message=message.message, sources=found.sources,
                        hint=message.hint)]


def _embedding(profile: NeuronProfile, facts: StartupInputs, resolved: dict[str, str]) -> list[RuleFinding]:
    """on_device_embedding as the release passes it (``serving.container_on_device_embedding``) against
    the NEFFs': another value is another graph, and presharded weights assert without it."""
    options = handler_options(facts.properties)
    served, why = container_on_device_embedding(profile, facts.layout, options)
    resolved["on_device_embedding"] = str(served).lower()
    built = facts.on_device_embedding
    if built is None or served == built:
        return []
    asserts = facts.layout == "neuronx-tnx" and not served
    outcome = ("transformers-neuronx asserts on the presharded weights" if asserts
               else "the graphs differ, so it would recompile")
    effect = "rejected" if asserts or facts.layout in PRECOMPILED else "recompiles"
    return [RuleFinding(rule="neuron_on_device_embedding", effect=effect,
                        message=f"{profile.name}: NEFFs compiled with on_device_embedding={str(built).lower()}, the "
                                f"container passes {str(served).lower()} ({why}): {outcome} "
                                f"({'; '.join(profile.on_device_embedding_sources)})",
                        sources=profile.on_device_embedding_sources,
                        hint="rebuild with the serving.properties the artifact ships")]


def _flags(profile: NeuronProfile, facts: StartupInputs, resolved: dict[str, str]) -> list[RuleFinding]:
    """The flags string the container computes against the NEFFs': the compile cache's key (a miss
    compiles); transformers-neuronx finds precompiled NEFFs by HLO hash alone, so those load, compiled
    with other flags than the container's."""
    served = facts.served_flags
    if served is None:
        base = facts.container_flags if facts.container_flags is not None else profile.neuron_cc_flags
        served = serving_compiler_flags(base, facts.properties)
    resolved["compiler_flags"] = served
    built = facts.compiler_flags
    if built is None or built == served:
        return []
    cache = facts.layout == CACHE_LAYOUT
    return [RuleFinding(
        # Finding 3: a precompiled tree loads whatever flags compiled it (lookup by HLO hash), so a
        # flags difference alone is a warning there; the compile cache keys on the flags: a miss.
        rule="compiler_flags", effect="recompiles" if cache else "warning",
        message=f"NEFFs compiled with flags '{built}', container uses '{served}'; " + (
            "the NEFF cache key differs, so it would recompile" if cache else
            "transformers-neuronx finds precompiled NEFFs by HLO hash, so it loads NEFFs compiled otherwise "
            "than the container would"),
        sources=sdk().startup.cache_flags_sources if cache else sdk().startup.neff_lookup_sources,
        hint="rebuild with the container's NEURON_CC_FLAGS")]

