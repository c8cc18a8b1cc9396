"""Hugging Face target: a (optionally ModelOpt-quantized) HF checkpoint for the LMI Python engines
(vLLM, LMI-Dist, TensorRT-LLM's PyTorch backend), which compile nothing ahead of time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from lmi_build.artifact.packager import written_properties
from lmi_build.core.types import TargetName
from lmi_build.core.versions import installed_versions
from lmi_build.model.spec import ModelSpec, PreQuantization
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning import checks
from lmi_build.planning.checkpoint_estimate import CheckpointWork
from lmi_build.planning.context import PlanContext, read_options
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import QuantizationPlan, ToolchainRef
from lmi_build.planning.quantization import QuantizationRules
from lmi_build.planning.target_api import ContainerFacts, RecipeRoute, TargetPlan
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.targets.hf.compatibility import PASSED_THROUGH
from lmi_build.targets.hf.engine_memory import engine_kv_budget
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.hf.loaders import architecture_problems, rope_problems
from lmi_build.targets.hf.options import HfOptions, withhold_quantize
from lmi_build.targets.hf.profiles import (
    ExportFormat,
    HfProfile,
    format_facts,
    format_words,
    get_profile,
    load_profiles,
    loads_format,
    serving_formats,
)
from lmi_build.targets.hf.startup import startup_problems

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_MAX_SEQ_LEN = 4096  # the memory estimate's sequence length when no max length is given
# The packages whose versions decide the exported bytes (read from metadata: nothing is imported).
_TOOL_PACKAGES = ("transformers", "nvidia-modelopt", "safetensors")


class HfPlanning:
    """The planning half of the hf target (``lmi_build.targets.hf.target``)."""

    name: TargetName = "hf"
    engine = "Python"
    accelerator: Literal["gpu", "neuron"] = "gpu"
    # An hf artifact keeps a pre-quantized input's own quant_algo; its GPTQ is written in the GPTQ layout
    # (quant_method gptq, W4A16_GPTQ as METHODS says), not ModelOpt's INT4 one.
    quantization = QuantizationRules(target="hf", prequantized_algo=lambda pre: pre.quant_algo)

    def container_profiles(self) -> dict[str, ContainerFacts]:
        return {p.name: ContainerFacts(versions=p.versions(), engine_capable=False) for p in load_profiles()}

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]:
        return "modelopt"

    def recipe_route(self, recipe: Recipe, support: TargetSupport, profile: str) -> RecipeRoute:
        found = get_profile(profile)
        applied = f"; lmi-build quantizes it with ModelOpt: {', '.join(support.quantize)}" if support.quantize else ""
        return RecipeRoute(True, route=f"the Hugging Face checkpoint, served by {found.name}'s engine as is{applied} "
                                       "(which quantized formats this engine loads: serving_formats.toml)")

    def toolchain(self, profile: str | None) -> ToolchainRef:
        name = get_profile(profile).name if profile else None
        return ToolchainRef(target="hf", profile=name, image=None, versions=installed_versions(_TOOL_PACKAGES))

    def plan(self, ctx: PlanContext) -> TargetPlan:
        tp = checks.resolve_tp(ctx)
        checks.check_tp_heads(ctx, tp)
        checks.check_rope_scaling_type(ctx)
        checks.check_kv_heads_gpu(ctx, tp)
        dtype = checks.resolve_dtype(ctx)

        given = read_options(ctx, HfOptions)
        max_input, max_output, max_model_len = given.max_input_len, given.max_output_len, given.max_model_len
        if max_input is not None and max_output is not None:
            checks.check_total_length(
                ctx, max_input + max_output, f"max_input_len + max_output_len ({max_input} + {max_output})",
                "lower --max-input-len/--max-output-len so that they sum to at most {limit}")
            seq_len = max_input + max_output
        elif max_model_len is not None:
            checks.check_total_length(ctx, max_model_len, "max_model_len", "lower option.max_model_len to {limit}")
            seq_len = max_model_len
        else:
            limit = checks.max_positions(ctx)
            seq_len = min(limit, DEFAULT_MAX_SEQ_LEN) if limit else DEFAULT_MAX_SEQ_LEN
        batch = given.max_rolling_batch_size or DEFAULT_MAX_BATCH_SIZE

        profile = get_profile(ctx.request.profile) if ctx.request.profile else None
        if profile is not None:
            errors, warnings = architecture_problems(profile, ctx.spec.architectures)
            ctx.findings.add_errors(errors + rope_problems(profile, ctx.spec.rope.scaling_type if ctx.spec.rope else None))
            for warning in warnings:
                ctx.findings.warn(warning.code, warning.message, warning.hint)
        build = HfBuild(tp=tp, dtype=dtype, export_format=plan_export_format(ctx, profile, dtype))
        ctx.write_options(HfOptions(engine=self.engine), "hf target")
        ctx.write_options(HfOptions(tensor_parallel_degree=tp), "resolved tp")
        ctx.write_options(HfOptions(dtype=checks.lmi_dtype(dtype)), "resolved dtype")
        if profile is not None:
            self._write_start_keys(ctx, profile)
            self._check_startup(ctx, profile)
        return TargetPlan(
            build=build,
            toolchain=self.toolchain(ctx.request.profile),
            # With a profile, the engine's own start-up sizing (engine_memory.py); without one, the whole batch.
            workload=Workload(batch_size=batch, seq_len=seq_len, tp=tp,
                              engine_kv=engine_kv_budget(ctx, profile, batch) if profile is not None else None),
            dtype=dtype,
            checkpoint_work=checkpoint_work(ctx.quantization, ctx.spec.torch_dtype, dtype),
        )

    @staticmethod
    def _write_start_keys(ctx: PlanContext, profile: HfProfile) -> None:
        """The keys without which ``profile``'s image would not start its engine (``start_sources``);
        a value the user gave is kept (the start-up check reads it)."""
        why = f"{profile.name}'s image starts {profile.engine} only so ({profile.start_sources[0] if profile.start_sources else ''})"
        given = ctx.user_options(HfOptions).model_fields_set
        if profile.start_rolling_batch and "rolling_batch" not in given:
            ctx.write_options(HfOptions(rolling_batch=profile.start_rolling_batch), why)
        if profile.start_mpi_mode and "mpi_mode" not in given:
            ctx.write_options(HfOptions(mpi_mode=True), why)

    @staticmethod
    def _check_startup(ctx: PlanContext, profile: HfProfile) -> None:
        """The profile's handler at start-up on the serving.properties this plan writes
        (``startup.startup_problems``, which ``verify --for-container`` applies to the built one)."""
        ctx.findings.add_errors(startup_problems(profile, written_properties(*ctx.written_properties(), "hf")))


def checkpoint_work(quantization: QuantizationPlan, source_dtype: str | None, dtype: str) -> CheckpointWork | None:
    """A quantization or a dtype change makes a new checkpoint on this host; otherwise the source's
    safetensors are the artifact's (a pre-quantized input is passed through as it is)."""
    if quantization.pre_quantized is not None:
        return None
    if quantization.method is not None:
        return CheckpointWork(family="hf", dtype=dtype)
    if source_dtype != dtype:
        return CheckpointWork(family="hf", dtype=dtype, cpu_only="the hf conversion streams the shards on the CPU")
    return None


def export_format(quantization: QuantizationPlan, profile: HfProfile | None = None,
                  model_type: str | None = None) -> ExportFormat | None:
    """The checkpoint format of a quantization for ``profile``'s engine (None: the container loads
    no format lmi-build writes for it). Without a profile: the format the newest hf profile loads
    (``default_format``). No quantization, or a pre-quantized input passed through: plain HF."""
    method = quantization.method
    if method is None or quantization.pre_quantized is not None:
        return "hf"
    if profile is None:
        return default_format(method, model_type)
    return profile.formats.get(method) or None


def writable(fmt: str, model_type: str | None) -> bool:
    """Whether lmi-build can write ``fmt`` for ``model_type``: AutoAWQ needs the AWQ scales folded
    into the layers, which ModelOpt does only for some model types (serving_formats.toml)."""
    return fmt != "awq" or model_type in format_facts("awq").fold_model_types


def default_format(method: str, model_type: str | None) -> ExportFormat:
    """What a quantized hf build writes without --profile: the format the newest hf profile loads
    for ``method`` (AutoAWQ, AutoGPTQ, ModelOpt FP8 today), so that an LMI container serves it; only
    where no profile loads one lmi-build can write for ``model_type``, ModelOpt's unified format
    (TensorRT-LLM's PyTorch backend reads it), which the plan says no LMI profile loads."""
    for profile in reversed(load_profiles()):
        fmt = profile.formats.get(method)
        if fmt and writable(fmt, model_type):
            return fmt
    return "modelopt_hf"


def loading_profiles(fmt: str, quant_algo: str | None, architectures: Sequence[str]) -> list[HfProfile]:
    """The hf profiles whose engine loads a checkpoint of ``fmt`` and of one of ``architectures``
    (a Transformers-backend fallback counts: the plan warns about it separately)."""
    return [p for p in load_profiles()
            if loads_format(p, fmt, quant_algo) and not architecture_problems(p, architectures)[0]]


def _check_passed_through(ctx: PlanContext, profile: HfProfile, pre: PreQuantization) -> None:
    """A pre-quantized input is packaged as it is: refuse one whose format ``profile``'s engine does not load
    (the rule ``verify --for-container`` applies to the artifact, ``compatibility.format_problems``)."""
    fmt = PASSED_THROUGH.get(pre.method)
    if fmt is None or loads_format(profile, fmt, pre.quant_algo):
        return
    others = [p.name for p in load_profiles() if loads_format(p, fmt, pre.quant_algo)]
    ctx.findings.error("hf_format", f"the input is a pre-quantized {format_words(fmt, pre.quant_algo)} checkpoint; "
                       f"{profile.name} ({profile.engine}, {profile.runs_on}) loads no {fmt} checkpoint",
                       hint=f"use --profile {others[0]} (the first hf profile that loads it)" if others
                       else "start from the unquantized model")


def _refuse_unloadable_method(ctx: PlanContext, profile: HfProfile, method: str, where: str) -> None:
    """--quantize ``method`` on a profile that loads none of the formats lmi-build writes for it: the
    methods it does load (if any), and the other profiles that load this one."""
    model_type = ctx.spec.model_type
    loadable = sorted(m for m, f in profile.formats.items() if f and writable(f, model_type))
    names = [p.name for p in load_profiles()]  # oldest first
    others = [p.name for p in load_profiles() if p.name != profile.name and p.formats.get(method)
              and writable(p.formats[method], model_type)]
    ctx.findings.error("hf_format", f"{where} loads no --quantize {method} checkpoint that lmi-build writes",
                       hint=(f"use --quantize {' or '.join(loadable)} for this profile" if loadable else
                             "leave --quantize out for this profile (it loads no quantized checkpoint lmi-build writes)")
                            + (f", or --profile {_a_few(others, after=names.index(profile.name), order=names)}"
                               if others else ""))


def _a_few(others: list[str], *, after: int, order: list[str]) -> str:
    """Two of ``others`` at most, so that a hint stays short: the first release after this one that
    loads it (else the last before) and the last `profiles list` shows, with how many more do."""
    newer = [name for name in others if order.index(name) > after]
    first = newer[0] if newer else others[-1]
    picked = [first] if first == others[-1] else [first, others[-1]]
    more = len(others) - len(picked)
    return " or ".join(picked) + (f" ({more} more load it: lmi-build profiles list)" if more else "")


def plan_export_format(ctx: PlanContext, profile: HfProfile | None, dtype: str) -> ExportFormat:
    """``export_format`` with its plan findings; a quantized checkpoint declares its method in
    config.json, so option.quantize is kept out of serving.properties (serving_formats.toml [serving])."""
    quant = ctx.quantization
    if quant.pre_quantized is not None and profile is not None:
        _check_passed_through(ctx, profile, quant.pre_quantized)
    if quant.method is None or quant.pre_quantized is not None:
        return "hf"
    where = "LMI's vLLM/LMI-Dist containers" if profile is None else f"{profile.name} ({profile.engine}, {profile.runs_on})"
    model_type = ctx.spec.model_type
    chosen = export_format(quant, profile, model_type)
    if chosen is None:  # only a profile loads none
        assert profile is not None
        _refuse_unloadable_method(ctx, profile, quant.method, where)
        chosen = "modelopt_hf"
    _check_format(ctx, chosen, dtype, where)
    if serving_formats().serving.withhold_quantize:
        withhold_quantize(ctx)
    state_loading_profiles(ctx, profile, chosen)
    return chosen


def _check_format(ctx: PlanContext, chosen: ExportFormat, dtype: str, where: str) -> None:
    """What the ``chosen`` format cannot hold (AWQ scales left unfolded, KV-cache scales) or serves
    only on some GPUs."""
    kv_cache = ctx.quantization.kv_cache_quant_algo
    folds = format_facts("awq").fold_model_types
    if chosen == "awq" and ctx.spec.model_type not in folds:
        ctx.findings.error("hf_format_awq_fold", f"AWQ scales of {ctx.spec.architecture} cannot be folded into "
                           f"the AutoAWQ format {where} loads (ModelOpt folds them for model types {', '.join(folds)})",
                           hint="use --quantize gptq or fp8 for this profile (AWQ of this model is written only in "
                                "ModelOpt's format, without --profile, which no LMI profile loads)")
    if chosen in ("awq", "gptq") and kv_cache is not None:
        ctx.findings.error("hf_format_kv_cache", f"the {chosen} checkpoint format has no place for "
                           f"{kv_cache} KV-cache scales",
                           hint="drop option.kv_cache_dtype (vLLM can quantize the KV cache at run time), "
                                "or use --quantize fp8")
    if chosen == "compressed_tensors" and kv_cache is not None:
        ctx.findings.error("hf_format_kv_cache", f"lmi-build writes no {kv_cache} KV-cache scales "
                           "into compressed-tensors checkpoints (ModelOpt's FP8 export is rewritten without them)",
                           hint="drop option.kv_cache_dtype (vLLM can quantize the KV cache at run time)")
    if chosen == "compressed_tensors":
        ctx.findings.warn("hf_format_fp8_gpu", f"{where} serves compressed-tensors FP8 with FP8 matmuls "
                          "(sm89+: L4, L40S, H100); that path has no weight-only fallback for older GPUs",
                          hint="serve on g6/g6e/p5 instances, or use --quantize awq or gptq for A10G/A100")
    if chosen in ("awq", "gptq") and dtype == "bfloat16":
        ctx.findings.warn("hf_format_dtype", f"{chosen} in bfloat16 is served only by vLLM's {chosen}_marlin "
                          f"kernel (its {chosen} kernel takes float16 activations)",
                          hint="serve on a GPU the marlin kernel supports (sm80+), or build with --dtype fp16")


def state_loading_profiles(ctx: PlanContext, profile: HfProfile | None, fmt: ExportFormat) -> None:
    """Before the build: which LMI containers will load the checkpoint this plan writes (the rule
    ``verify --for-container`` applies to the built one), as a plan message; a --profile that is
    not one of them refuses the plan, naming those that are."""
    if ctx.findings.errors:
        return  # the plan is refused already
    quant = ctx.quantization
    loaders = [p.name for p in loading_profiles(fmt, quant.quant_algo, ctx.spec.architectures)]
    others = [p.name for p in load_profiles() if p.name not in loaders]
    words = format_words(fmt, quant.quant_algo)
    what = f"--quantize {quant.method} writes {'an' if words[0] in 'AEIOU' else 'a'} {words} checkpoint"
    if profile is not None and profile.name not in loaders:
        ctx.findings.error("hf_format", f"{what}, which {profile.name} does not load; "
                           f"{'loaded by ' + ', '.join(loaders) if loaders else 'no LMI hf profile loads it'}",
                           hint=f"use --profile {' or '.join(loaders)}" if loaders else "use --quantize gptq or fp8")
        return
    if not loaders:
        ctx.findings.warn("hf_loaded_by", f"{what}, which no LMI container profile lmi-build knows loads "
                          f"(hf profiles: {', '.join(others)}; TensorRT-LLM's PyTorch backend reads ModelOpt's "
                          "format)", hint="for vLLM/LMI-Dist containers use --quantize gptq or fp8")
        return
    elsewhere = f"; not by {', '.join(others)}" if others else ""
    rebuild = [name for name in others if _writes_another_format(get_profile(name), fmt, quant, ctx.spec.model_type,
                                                                 ctx.spec.architectures)]
    ctx.findings.warn("hf_loaded_by", f"{what}, loaded by {', '.join(loaders)}{elsewhere}",
                      hint="verify --for-container PROFILE checks the built artifact"
                           + (f"; --profile {' or '.join(rebuild)} writes the format that one loads" if rebuild else ""))


def _writes_another_format(profile: HfProfile, fmt: ExportFormat, quant: QuantizationPlan, model_type: str | None,
                           architectures: Sequence[str]) -> bool:
    """Whether --profile ``profile`` would give a checkpoint it loads where ``fmt`` does not load."""
    other = export_format(quant, profile, model_type)
    return (other is not None and other != fmt and writable(other, model_type)
            and not architecture_problems(profile, architectures)[0])
