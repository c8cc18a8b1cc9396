"""One model of an LMI TensorRT-LLM release's start-up (issue 22, Deliver 1): from the artifact's
serving.properties, its files, the engine it holds and the serving profile, what the release does
with it - the keys it resolves (the TensorRT-LLM path, LmiConfigRecommender's batch defaults, the
parallel degrees), whether it detects a prebuilt engine (else it JIT-builds one), how the runtime
takes the engine, and the outcome: ``loads`` (which engine files), ``rebuilds`` (why it does not
see a usable engine) or ``rejected`` (the vendor's message).

``evaluate`` composes the target's existing checks, in the order start-up meets them; each is still
defined once, in its own module, and cited in the data it reads:

- the code path DJL takes (the profile's ``[startup]`` path);
- the batch defaults the recommender fills (the profile's ``[defaults]``, cited there and in its
  ``[startup]`` recommender; ``plan.RELEASE_DEFAULT_OPTIONS`` writes the same values);
- prebuilt-engine detection per layout: toolkit (0.26-0.30) a sub-directory holding config.pbtxt
  and tokenizer_config.json, flat (0.33+) a config.json with build_config (``layouts``; detection);
- the TensorRT-LLM and TensorRT that built the engines (``compatibility.BOUND_VERSIONS``; engine_version):
  0.30 and 0.32 both run TensorRT-LLM 0.12.0, on TensorRT 10.3.0 and 10.1.0;
- a rank engine file per rank of the engine's world size (``engine_check.RANK_FILE``; ranks);
- the engine against the resolved serving.properties (``engine_match.engine_differences``): a
  world size the runtime refuses, a batch it caps, the rest served as built; on the flat layout
  the LLM() arguments (tensor_parallel_size, pipeline_parallel_size) as the service passes them.

``plan`` evaluates it on the artifact it will write (``from_planned``) and ``verify
--for-container`` on the artifact's manifest (``from_manifest``; the engine is the plan's: the
build refuses an engine that is not, ``build._check_engine_is_the_plans``). Each rule with an
effect other than ``resolves`` is a plan/verify message whose code is the rule's id.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.packager import written_properties
from lmi_build.core.tables import load_table
from lmi_build.planning.context import read_text, written_text
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.planning.startup import RuleFinding, StartupOutcome
from lmi_build.targets.trtllm.engine_check import RANK_FILE, world_size_of
from lmi_build.targets.trtllm.engine_match import engine_differences, expectation_from_properties
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.layouts import ENGINE_SUBDIR, TOOLKIT_DIR, flat_properties, toolkit_properties
from lmi_build.targets.trtllm.options import TrtllmOptions, written_or
from lmi_build.targets.trtllm.profiles import ContainerProfile, StartupRules

TOOLKIT_LAYOUT = "trtllm-toolkit"
FLAT_LAYOUT = "trtllm-flat"
LAYOUTS = (TOOLKIT_LAYOUT, FLAT_LAYOUT)
RELEASE_DEFECT = "trtllm_runtime"  # the rule of the release's own service (runtime_warning / runtime_defect)
STARTUP_FILE = Path(__file__).with_name("data") / "startup.toml"
REBUILD_HINT = ("serve the artifact with a profile of its layout (lmi-build profiles list), or rebuild it for "
                "this profile")


class LayoutRules(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    world_size: tuple[str, ...]  # a tp x pp other than the engine's
    batch_cap: tuple[str, ...]  # a rolling batch above the engine's max_batch_size
    as_built: tuple[str, ...]  # the other engine limits, dtype, quantization


class EngineRules(BaseModel):
    """The engine checks of every release (``data/startup.toml``); a release's own are its profile's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    toolkit: LayoutRules
    flat: LayoutRules
    engine_version: tuple[str, ...]
    ranks: tuple[str, ...]


@lru_cache(maxsize=1)
def engine_rules() -> EngineRules:
    return load_table(STARTUP_FILE, EngineRules)


@dataclass(frozen=True)
class StartupInputs:
    """An artifact as the release's start-up sees it, from a manifest or from a plan."""

    properties: Mapping[str, str]  # serving.properties, full keys
    layout: str  # the artifact's layout ("trtllm-toolkit", "trtllm-flat")
    files: frozenset[str]  # relative POSIX paths of the artifact's files
    engine: Mapping[str, Any] | None  # the engine's config.json as the runtime reads it
    engine_version: str | None = None  # the TensorRT-LLM that built the engines; None: not recorded
    engine_tensorrt: str | None = None  # the TensorRT that built them (a 0.12.0 engine of 0.30 is not 0.32's)


def engine_config(build: TrtllmBuild, quantization: QuantizationPlan) -> dict[str, Any]:
    """The fields of the engine config.json (>= 0.8 shape) that the start-up reads, of the engine
    built from ``build``: the build refuses an engine that differs (``build._check_engine_is_the_plans``)."""
    plugins = {key: value for key, value in (("tokens_per_block", build.tokens_per_block),
                                             ("gemm_plugin", build.gemm_plugin),
                                             ("gpt_attention_plugin", build.gpt_attention_plugin)) if value is not None}
    return {
        "build_config": {"max_batch_size": build.max_batch_size, "max_input_len": build.max_input_len,
                         "max_seq_len": build.max_seq_len, "plugin_config": plugins},
        "pretrained_config": {
            "dtype": build.dtype,
            "mapping": {"world_size": build.world_size, "tp_size": build.tp, "pp_size": build.pp},
            "quantization": {"quant_algo": quantization.quant_algo or "",
                             "kv_cache_quant_algo": quantization.kv_cache_quant_algo or ""}},
    }


def planned_files(layout: str, world_size: int) -> frozenset[str]:
    """The files of ``layout`` that start-up looks at, as the packager will write them."""
    ranks = [f"rank{rank}.engine" for rank in range(world_size)]
    if layout == TOOLKIT_LAYOUT:
        engines = f"{TOOLKIT_DIR}/{ENGINE_SUBDIR}"
        return frozenset({f"{TOOLKIT_DIR}/config.pbtxt", f"{TOOLKIT_DIR}/tokenizer_config.json",
                          f"{engines}/config.json", *(f"{engines}/{rank}" for rank in ranks)})
    return frozenset({"config.json", *ranks})


def from_manifest(manifest: Manifest) -> StartupInputs | None:
    """The inputs of a built artifact: its serving.properties, files, and the engine its plan built;
    None for a layout this model does not know."""
    if manifest.layout not in LAYOUTS:
        return None
    plan = manifest.plan
    try:
        build = TrtllmBuild.model_validate(plan.get("build") or {})
        quantization = QuantizationPlan.model_validate(plan.get("quantization") or {})
    except ValidationError:
        engine = None
    else:
        engine = engine_config(build, quantization)
    return StartupInputs(properties=dict(manifest.serving_properties), layout=manifest.layout,
                         files=frozenset(entry.path for entry in manifest.files), engine=engine,
                         engine_version=manifest.toolchain.version("tensorrt_llm"),
                         engine_tensorrt=manifest.toolchain.version("tensorrt"))


def from_planned(options: Mapping[str, str], sources: Mapping[str, str], build: TrtllmBuild,
                 quantization: QuantizationPlan, profile: ContainerProfile) -> StartupInputs:
    """The inputs of the artifact a plan will write: the planned options serving.properties carries
    (``packager.written_properties``) and the layout's keys (``layouts.toolkit_properties`` /
    ``flat_properties``), with the files and engine the build will make."""
    toolkit = profile.layout == "toolkit"
    properties = written_properties(options, sources, "trtllm")
    properties.update(toolkit_properties(build) if toolkit else flat_properties(build))
    layout = TOOLKIT_LAYOUT if toolkit else FLAT_LAYOUT
    return StartupInputs(properties=properties, layout=layout, files=planned_files(layout, build.world_size),
                         engine=engine_config(build, quantization), engine_version=profile.tensorrt_llm,
                         engine_tensorrt=profile.tensorrt)


def evaluate(profile: ContainerProfile, facts: StartupInputs) -> StartupOutcome:
    """What ``profile``'s release does at start-up with the artifact ``facts`` describe."""
    release = profile.startup
    toolkit = profile.layout == "toolkit"
    loader = "trtllm-toolkit" if toolkit else "trtllm-llm-api"
    rules: list[RuleFinding] = []
    resolved: dict[str, str] = {}
    _path(profile, release, facts, rules, resolved)
    _recommender(profile, release, facts, rules, resolved)
    _parallel(profile, facts, resolved)
    engine_dir = _detect(profile, release, facts, rules)
    engines: tuple[str, ...] = ()
    if engine_dir is not None and facts.engine is not None:
        rules += _engine_version(profile, facts)
        engines, found = _ranks(profile, facts, engine_dir)
        rules += found
        rules += _engine(profile, facts, resolved)
    if release.runtime_defect:
        rules.append(RuleFinding(rule=RELEASE_DEFECT, effect="rejected", message=f"{profile.name}: "
                                 f"{release.runtime_defect}", sources=release.runtime,
                                 hint="serve on a release whose service starts (the default profile, lmi-build "
                                      "profiles list), or give serving.properties an option.entryPoint of your own"))
    elif release.runtime_warning:
        rules.append(RuleFinding(rule=RELEASE_DEFECT, effect="warning", message=f"{profile.name}: "
                                 f"{release.runtime_warning}", sources=release.runtime))
    effects = {rule.effect for rule in rules}
    outcome = "rejected" if "rejected" in effects else "rebuilds" if "rebuilds" in effects else "loads"
    return StartupOutcome(profile=profile.name, outcome=outcome, loader=loader, resolved=resolved,
                          loads=engines if outcome == "loads" else (), loads_kind="engine files", rules=tuple(rules))


# -- the rules, in the order start-up meets them ---------------------------------------------------

def _path(profile: ContainerProfile, release: StartupRules, facts: StartupInputs, rules: list[RuleFinding],
          resolved: dict[str, str]) -> None:
    """Whether DJL takes its TensorRT-LLM path: toolkit releases for option.rolling_batch trtllm (or
    unset/auto, with the image's SERVING_FEATURES=trtllm) and put rolling_batch=trtllm; the flat
    releases unless option.backend=pytorch."""
    text = read_text(facts.properties, TrtllmOptions)
    if profile.layout == "toolkit":
        given = text.rolling_batch or ""
        if given.lower() not in ("", "auto", "trtllm"):
            rules.append(RuleFinding(
                rule="trtllm_path", effect="rejected",
                message=f"{profile.name} takes its TensorRT-LLM path only for option.rolling_batch trtllm (or "
                        f"auto), this serving.properties has {given}: the engines are not loaded (what the {given} "
                        "handler makes of the directory is inferred)",
                sources=release.path, hint="write option.rolling_batch=trtllm (lmi-build writes it)"))
            resolved["rolling_batch"] = given
            return
        resolved["rolling_batch"] = "trtllm"
        rules.append(RuleFinding(rule="trtllm_path", effect="resolves",
                                 message=f"option.rolling_batch {given or 'unset'} -> trtllm (convertTrtLLM)",
                                 sources=release.path))
        return
    resolved["rolling_batch"] = written_or(text.rolling_batch, "auto")
    if (text.backend or "").lower() == "pytorch":
        rules.append(RuleFinding(
            rule="trtllm_path", effect="rejected",
            message=f"option.backend=pytorch: {profile.name} does not take its engine path, and its PyTorch backend "
                    "loads a Hugging Face checkpoint, not TensorRT engines (inferred past needConvertTrtLLM)",
            sources=release.path, hint="drop option.backend"))
        return
    rules.append(RuleFinding(rule="trtllm_path", effect="resolves",
                             message="engine path: SERVING_FEATURES=trtllm and option.backend is not pytorch",
                             sources=release.path))


def _recommender(profile: ContainerProfile, release: StartupRules, facts: StartupInputs, rules: list[RuleFinding],
                 resolved: dict[str, str]) -> None:
    """LmiConfigRecommender's batch defaults: for rolling_batch=trtllm the profile's [defaults]
    (what ``plan`` writes too), otherwise the release's 32."""
    text = read_text(facts.properties, TrtllmOptions)
    given = text.max_rolling_batch_size or ""
    trtllm = resolved.get("rolling_batch") == "trtllm"
    if given:
        resolved["max_rolling_batch_size"] = given
        why = f"option.max_rolling_batch_size {given} as written"
    else:
        filled = profile.defaults.get("max_rolling_batch_size") if trtllm else None
        resolved["max_rolling_batch_size"] = filled or str(release.unset_batch)
        why = f"option.max_rolling_batch_size unset -> {resolved['max_rolling_batch_size']} (the recommender)"
        tokens = profile.defaults.get("max_num_tokens")
        if trtllm and profile.layout == "toolkit" and tokens and filled and not text.max_num_tokens:
            resolved["max_num_tokens"] = tokens
            why += f", option.max_num_tokens -> {tokens}"
    if "max_num_tokens" not in resolved and text.max_num_tokens:
        resolved["max_num_tokens"] = text.max_num_tokens
    rules.append(RuleFinding(rule="trtllm_recommender", effect="resolves", message=why, sources=release.recommender))


def _parallel(profile: ContainerProfile, facts: StartupInputs, resolved: dict[str, str]) -> None:
    """The parallel degrees as the release reads them: the toolkit's MPI engine starts
    tensor_parallel_degree x pipeline_parallel_degree ranks; the flat service passes
    tensor_parallel_degree and pipeline_parallel_size to LLM() (layouts.flat_properties)."""
    text = read_text(facts.properties, TrtllmOptions)
    resolved["tensor_parallel_degree"] = written_or(text.tensor_parallel_degree, "max")
    if profile.layout == "toolkit":
        resolved["pipeline_parallel_degree"] = written_or(text.pipeline_parallel_degree, "1")
    else:
        resolved["pipeline_parallel_size"] = written_or(text.pipeline_parallel_size, "1")
        resolved["dtype"] = written_or(text.dtype, "auto")



def _detect(profile: ContainerProfile, release: StartupRules, facts: StartupInputs,
            rules: list[RuleFinding]) -> str | None:
    """The directory of the engines the release loads, or None when it detects no prebuilt engine
    and JIT-builds one (``rebuilds``)."""
    if profile.layout == "toolkit":
        tops = {path.split("/")[0] for path in facts.files if path.count("/") == 1}
        repos = sorted(top for top in tops if f"{top}/config.pbtxt" in facts.files
                       and f"{top}/tokenizer_config.json" in facts.files)
        if not repos:
            rules.append(RuleFinding(
                rule="trtllm_detection", effect="rebuilds",
                message=f"no sub-directory of the model directory holds both config.pbtxt and tokenizer_config.json "
                        f"(the artifact is {facts.layout}): {profile.name} JIT-builds engines from it with "
                        "trt_llm_partition.py instead of loading the artifact's",
                sources=release.detection, hint=REBUILD_HINT))
            return None
        rules.append(RuleFinding(rule="trtllm_detection", effect="resolves",
                                 message=f"prebuilt model repo {repos[0]}/ (config.pbtxt + tokenizer_config.json)",
                                 sources=release.detection))
        return f"{repos[0]}/{ENGINE_SUBDIR}/"
    has_config = "config.json" in facts.files
    if not has_config or facts.engine is None or "build_config" not in facts.engine:
        what = "has no config.json" if not has_config else "config.json has no build_config"
        rules.append(RuleFinding(
            rule="trtllm_detection", effect="rebuilds",
            message=f"the model directory {what} (the artifact is {facts.layout}): {profile.name} JIT-builds "
                    "engines from it with trt_llm_partition.py instead of loading the artifact's",
            sources=release.detection, hint=REBUILD_HINT))
        return None
    rules.append(RuleFinding(rule="trtllm_detection", effect="resolves",
                             message="prebuilt engine: config.json with build_config", sources=release.detection))
    return ""


def _engine_version(profile: ContainerProfile, facts: StartupInputs) -> list[RuleFinding]:
    built = facts.engine_version
    if built is None or built == profile.tensorrt_llm:
        tensorrt = facts.engine_tensorrt
        if tensorrt is None or tensorrt == profile.tensorrt:
            return []
        return [RuleFinding(rule="trtllm_engine_version", effect="rejected",
                            message=f"engines built with TensorRT {tensorrt}, {profile.name} has TensorRT "
                                    f"{profile.tensorrt} (the same TensorRT-LLM {profile.tensorrt_llm}): TensorRT does "
                                    "not deserialize an engine of another version",
                            sources=engine_rules().engine_version, hint="rebuild with this profile (--profile)")]
    return [RuleFinding(rule="trtllm_engine_version", effect="rejected",
                        message=f"engines built by TensorRT-LLM {built}, {profile.name} runs {profile.tensorrt_llm}: "
                                "TensorRT does not deserialize an engine of another version",
                        sources=engine_rules().engine_version, hint="rebuild with this profile (--profile)")]


def _ranks(profile: ContainerProfile, facts: StartupInputs, engine_dir: str) -> tuple[tuple[str, ...], list[RuleFinding]]:
    """The rank engine files the runtime loads, and a refusal when one is missing."""
    engines = sorted(path for path in facts.files if path.startswith(engine_dir)
                     and "/" not in path[len(engine_dir):] and RANK_FILE.match(path[len(engine_dir):]))
    numbers = sorted(int(match.group(1)) for path in engines if (match := RANK_FILE.match(path[len(engine_dir):])))
    world = world_size_of(dict(facts.engine or {}))
    if numbers == list(range(world)):
        return tuple(engines), []
    return tuple(engines), [RuleFinding(
        rule="trtllm_engine_ranks", effect="rejected",
        message=f"{profile.name}: {len(engines)} rank engine file(s) in {engine_dir or 'the model directory'} for an "
                f"engine of world size {world}",
        sources=engine_rules().ranks, hint="rebuild the artifact; an upload may have been cut short")]


def _engine(profile: ContainerProfile, facts: StartupInputs, resolved: dict[str, str]) -> list[RuleFinding]:
    """The engine against serving.properties as the release resolved it (``engine_match``)."""
    layout_rules = engine_rules().toolkit if profile.layout == "toolkit" else engine_rules().flat
    size = resolved["max_rolling_batch_size"].strip()  # as written, or the recommender's default
    # A size that is no integer stays as written: the engine check reads it as unset.
    properties = {**facts.properties,
                  **written_text(TrtllmOptions(max_rolling_batch_size=int(size) if size.isdigit() else None))}
    found: list[RuleFinding] = []
    if profile.layout != "toolkit":
        found += _llm_parallel(profile, facts, layout_rules)
    hint = "rebuild the artifact, or fix serving.properties to match the engine"
    for difference in engine_differences(dict(facts.engine or {}), expectation_from_properties(properties)):
        if difference.key == "world size":
            if profile.layout != "toolkit":
                continue  # the LLM() arguments above
            found.append(RuleFinding(
                rule="trtllm_world_size", effect="rejected",
                message=f"{profile.name}: engine=MPI starts tensor_parallel_degree x pipeline_parallel_degree ranks, "
                        f"the engine is another world size ({difference.message}): TensorRT-LLM's runtime refuses "
                        "the MPI size",
                sources=layout_rules.world_size, hint=hint))
        elif difference.key == "max_batch_size":
            found.append(RuleFinding(
                rule="trtllm_max_batch_size", effect="degrades",
                message=f"{profile.name} batches at most the engine's max_batch_size, fewer than serving.properties "
                        f"says ({difference.message})",
                sources=layout_rules.batch_cap, hint=hint))
        else:
            found.append(RuleFinding(
                rule=f"trtllm_engine_{difference.key.replace(' ', '_')}", effect="degrades",
                message=f"{profile.name} serves the engine as built, not as serving.properties says ({difference.message})",
                sources=layout_rules.as_built, hint=hint))
    return found


def _llm_parallel(profile: ContainerProfile, facts: StartupInputs, layout_rules: LayoutRules) -> list[RuleFinding]:
    """The flat service's LLM(tensor_parallel_size, pipeline_parallel_size) against the engine's
    mapping: 1 takes the engine's, another value than the engine's is a ValueError."""
    pretrained = (facts.engine or {}).get("pretrained_config")
    mapping = pretrained.get("mapping") if isinstance(pretrained, Mapping) else None
    if not isinstance(mapping, Mapping):
        return []
    found = []
    text = read_text(facts.properties, TrtllmOptions)
    for name, key, written, engine_key in (
            ("tp_size", "option.tensor_parallel_degree", text.tensor_parallel_degree, "tp_size"),
            ("pp_size", "option.pipeline_parallel_size", text.pipeline_parallel_size, "pp_size")):
        given = written or ""
        built = mapping.get(engine_key, 1)
        if given.isdigit() and int(given) not in (1, built):
            found.append(RuleFinding(
                rule="trtllm_llm_parallel", effect="rejected",
                message=f"{profile.name}: LLM() raises ValueError: {name} {given} is not consistent with the engine's "
                        f"{name} {built} ({key}={given})",
                sources=layout_rules.world_size, hint=f"write {key}={built}, or rebuild"))
    return found
