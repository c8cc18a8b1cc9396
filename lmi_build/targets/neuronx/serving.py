"""What an LMI Neuron release does with the serving.properties it reads at start-up: the loader DJL
picks, continuous batching, on_device_embedding and the compiler flags string. ``plan`` resolves the
artifact it writes with these rules and ``startup`` checks a built one against them, so both import
them from here (numbers and sources in ``targets/neuronx/data/neuron_sdk.toml``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lmi_build.options.booleans import parse_bool
from lmi_build.planning.context import read_text
from lmi_build.targets.neuronx.options import NeuronxOptions
from lmi_build.targets.neuronx.sdk import sdk

if TYPE_CHECKING:
    from lmi_build.targets.neuronx.profiles import Loader, NeuronProfile


def compiler_flags(base: str, optimize_level: int | None, mixed_precision: bool, saturate_infinity: bool,
                   *, properties_built: int = 1) -> str:
    """NEURON_CC_FLAGS as the LMI container hands them to neuronx-cc, byte for byte (the NEFF cache
    key hashes this string). DJL appends ``-O<n>`` and the two precision flags whenever the option
    is set (even to false), in its field order, each time it builds its properties object (twice
    with a speculative draft model: ``properties_built=2``); transformers-neuronx then appends each
    required flag that is absent."""
    flags = base
    for _ in range(properties_built):
        if optimize_level is not None:
            flags += f" -O{optimize_level}"
        if mixed_precision:
            flags += " --enable-mixed-precision-accumulation"
        if saturate_infinity:
            flags += " --enable-saturate-infinity"
    # transformers-neuronx get_compiler_flags: the stripped flags, then each required flag whose key
    # is not a substring of them (compiler.py:89-105).
    user = flags.strip()
    parts = [user] if user else []
    parts += [required for required in sdk().compiler.required_flags if required.split("=", 1)[0] not in user]
    return " ".join(parts)


def serving_compiler_flags(container_flags: str, properties: Mapping[str, str]) -> str:
    """The flags string a container whose NEURON_CC_FLAGS is ``container_flags`` computes for these
    serving.properties (what verify compares an artifact's flags with)."""
    text = read_text(properties, NeuronxOptions)
    level = text.neuron_optimize_level
    return compiler_flags(container_flags, int(level) if level and level.isdigit() else None,
                          text.enable_mixed_precision_accumulation is not None,  # present: DJL passes the flag
                          text.enable_saturate_infinity is not None,
                          properties_built=2 if text.speculative_draft_model else 1)


class LoaderRefused(ValueError):
    """DJL itself would refuse this option.model_loader at start-up (message, hint)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _optimum_unsupported(model_type: str, rolling: bool) -> bool:
    """DJL's ``optimum_not_supported`` (0.27+ transformers_neuronx.py) for a CausalLM model."""
    rules = sdk().loader_rules
    return model_type not in rules.optimum_model_types or (
        model_type in rules.optimum_needs_rolling_batch and not rolling)


def choose_loader(profile: NeuronProfile, *, model_type: str, rolling: bool,
                  options: Mapping[str, str], rolling_batch: str | None = None) -> Loader:
    """The model loader DJL picks in ``profile``'s release, from the serving.properties it will
    read (``options``: keys without ``option.``, only those set). An explicit ``model_loader`` wins
    where the release has it; 0.27+ ``partition_schema`` picks one when it is unset; then the
    release's default: 0.28+ transformers-neuronx; 0.26 optimum-neuron unless rolling batch, a model
    type outside optimum's, load_split_model or load_in_8bit; 0.27 optimum-neuron for its model
    types (llama/mistral only with rolling batch) unless a TNX-only option is set. Raises
    ``LoaderRefused`` where DJL would fail to start. ``model_loader=vllm`` is the vLLM loader only
    when ``rolling_batch`` (as the release resolves it) is vllm; otherwise DJL sets no loader class
    for it and keeps transformers-neuronx (``vllm_loader_sources``)."""
    rules = sdk().loader_rules
    requested, schema = options.get("model_loader"), options.get("partition_schema")
    if requested is not None:
        return _requested_loader(profile, requested, schema, model_type=model_type, rolling=rolling,
                                 rolling_batch=rolling_batch)
    if schema is not None and profile.tnx_switch != "rolling_batch":
        return "optimum" if schema == rules.optimum_partition_schema else "tnx"
    if profile.default_loader == "tnx":
        return "tnx"
    if profile.tnx_switch == "rolling_batch":
        forced = any(parse_bool(options.get(key, "")) for key in rules.tnx_true_options_026)
        tnx = rolling or forced or model_type not in rules.optimum_model_types_026
        return "tnx" if tnx else "optimum"
    if _optimum_unsupported(model_type, rolling) or set(options) & set(rules.tnx_only_options):
        return "tnx"
    return "optimum"


def _requested_loader(profile: NeuronProfile, requested: str, schema: str | None, *, model_type: str,
                      rolling: bool, rolling_batch: str | None) -> Loader:
    """The loader of an explicit option.model_loader, or the refusal of it next to this partition_schema."""
    rules = sdk().loader_rules
    if requested not in profile.model_loaders:
        accepted = ", ".join(profile.model_loaders) or "none (the loader follows from the model and options)"
        raise LoaderRefused(f"{profile.name} has no option.model_loader={requested}",
                            f"model_loader values of that release: {accepted}")
    if (requested == "tnx") == (schema == rules.optimum_partition_schema) and schema is not None:
        # validate_schema_loader_combination (0.27+): tnx never loads an optimum schema, optimum nothing else.
        raise LoaderRefused(f"{profile.name} refuses option.model_loader={requested} with option.partition_schema="
                            f"{schema}", "drop option.partition_schema, or make it match the loader")
    if requested == "optimum" and profile.tnx_switch == "none":
        if schema != rules.optimum_partition_schema:
            raise LoaderRefused(f"{profile.name} refuses option.model_loader=optimum without "
                                f"option.partition_schema={rules.optimum_partition_schema}",
                                f"add -o option.partition_schema={rules.optimum_partition_schema}")
        if _optimum_unsupported(model_type, rolling):
            raise LoaderRefused(f"{profile.name}'s optimum loader does not support {model_type} "
                                f"{'with' if rolling else 'without'} rolling batch",
                                "leave option.model_loader unset (transformers-neuronx)")
    if requested == "vllm" and rolling_batch is not None:
        if rolling_batch != "vllm":
            return "tnx"
        if model_type not in rules.vllm_loader_model_types:
            raise LoaderRefused(f"{profile.name} refuses option.model_loader=vllm for {model_type}: DJL raises "
                                "\"VllmModelLoader does not support this config\" (vLLM's Neuron loader there "
                                f"takes {', '.join(rules.vllm_loader_model_types)}; "
                                f"{'; '.join(rules.vllm_loader_sources)})",
                                "leave option.model_loader unset (transformers-neuronx)")
    return requested


def continuous_batching(profile: NeuronProfile, *, rolling: bool, batch: int, model_type: str,
                        rolling_batch: str | None = None) -> bool:
    """Whether DJL compiles for TNX continuous batching in this release (profile rule;
    ``rolling_batch``: the resolved option.rolling_batch, vllm being continuous where the release
    says so)."""
    if not rolling:
        return False
    if profile.vllm_continuous_batching and rolling_batch == "vllm":
        return True
    if profile.continuous_batching_rule == "rolling":
        return True
    model_types = sdk().defaults.continuous_batching_model_types
    if profile.continuous_batching_rule == "rolling_model_type":
        return model_type in model_types
    return batch > 1 and model_type in model_types


def contexts_refusal(profile: NeuronProfile, given: list[int], top: int, bsh: bool) -> str | None:
    """Why DJL raises on this context_length_estimate under continuous batching, as parsed (the
    given order), or None (``continuous_batching_contexts_must_equal_n``)."""
    rule = profile.continuous_batching_contexts_must_equal_n
    if rule == "always" and given != [top]:
        return f"it must be exactly [{top}] (n_positions)"
    if rule == "cache_layout_bsh" and bsh and given != [top]:
        return f"with option.cache_layout=BSH it must be exactly [{top}] (n_positions)"
    if rule == "cache_layout_bsh_first" and bsh and given[0] != top:
        return f"with option.cache_layout=BSH its first entry must be {top} (n_positions)"
    return None


def container_on_device_embedding(profile: NeuronProfile, layout: str, options: Mapping[str, str]) -> tuple[bool, str]:
    """(on_device_embedding as the release passes it to NeuronConfig, why) for an artifact of
    ``layout`` served with these serving.properties (``options``: keys without ``option.``, as set).
    0.30+ (``precompiled_on_device_embedding``): load_split_model=true turns it on; else the written
    option; else on only where the served config.json has a ``neuron`` block (the precompiled
    layout; not the compile-cache tree, served beside the original weights). 0.27 reads the option
    (default off); 0.26, 0.28 and 0.29 never set it (``on_device_embedding_sources``)."""
    written = parse_bool(options.get("on_device_embedding", "")) if profile.on_device_embedding_option else None
    if profile.precompiled_on_device_embedding:
        if parse_bool(options.get("load_split_model", "")):
            return True, "option.load_split_model=true turns it on"
        if written is not None:
            return written, f"option.on_device_embedding={str(written).lower()}"
        if layout != "neuronx-cache":
            return True, "the smart default for a config.json with a neuron block"
        return False, "served beside the original config.json (no neuron block): no smart default"
    if written is not None:
        return written, f"option.on_device_embedding={str(written).lower()}"
    return False, "the release does not set it"
