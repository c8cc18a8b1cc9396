"""TensorRT-LLM target: resolve the engine build's knobs (``TrtllmBuild``) and its serving options.

Generating the vendor tools' argv from these knobs is ``lmi_build.targets.trtllm``'s job, not this one's.
"""

from __future__ import annotations

from typing import Literal

from lmi_build.core.errors import LmiBuildError, OptionError
from lmi_build.core.types import TargetName
from lmi_build.core.versions import release
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.options.spec import option_spec
from lmi_build.planning import checks
from lmi_build.planning.checkpoint_estimate import CheckpointWork
from lmi_build.planning.context import PlanContext, read_options
from lmi_build.planning.gpus import normalize_sm, sm_number, sm_requirements
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import QuantizationPlan, ToolchainRef
from lmi_build.planning.startup import outcome_messages
from lmi_build.planning.target_api import ContainerFacts, RecipeRoute, TargetPlan
from lmi_build.quantize.tensor_map import lm_head_written, streamable
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.targets.trtllm.families import FamilyLimits, family_limits
from lmi_build.targets.trtllm.flags import flag_table
from lmi_build.targets.trtllm.knobs import TrtllmBuild, TrtllmRequest
from lmi_build.targets.trtllm.kv_cache import paged_kv_cache
from lmi_build.targets.trtllm.layouts import FLAT_ENGINE
from lmi_build.targets.trtllm.lengths import resolve_lengths
from lmi_build.targets.trtllm.options import TrtllmOptions, apply_release_defaults
from lmi_build.targets.trtllm.prequantized import QUANTIZATION
from lmi_build.targets.trtllm.profiles import ContainerProfile, get_profile, load_profiles
from lmi_build.targets.trtllm.routes import recipe_route
from lmi_build.targets.trtllm.since import (
    checkpoint_architecture,
    missing_architecture,
    missing_scaling,
    refusal,
    written_otherwise,
)
from lmi_build.targets.trtllm.startup import RELEASE_DEFECT, evaluate, from_planned
from lmi_build.targets.trtllm.steps import StepInputs, plan_steps


class TrtllmPlanning:
    """The planning half of the trtllm target (``lmi_build.targets.trtllm.target``)."""

    name: TargetName = "trtllm"
    engine = "MPI"
    accelerator: Literal["gpu", "neuron"] = "gpu"
    quantization = QUANTIZATION

    def container_profiles(self) -> dict[str, ContainerFacts]:
        return {profile.name: ContainerFacts(versions=profile.versions(), engine_capable=profile.engine_capable)
                for profile in load_profiles()}

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]:
        # Pre-quantized AutoAWQ/GPTQ inputs only convert with convert_checkpoint.py (use_autoawq).
        if spec.pre_quantization is not None or support.modelopt_decoder is None:
            return "vendor"
        # ModelOpt only exports per-tensor-activation SmoothQuant (W8A8_SQ_PER_CHANNEL); the
        # container's *_PLUGIN variants for per_token/per_channel come from convert_checkpoint.py.
        read = read_options(options, TrtllmOptions)
        if read.quantize == "smoothquant" and (read.smoothquant_per_token or read.smoothquant_per_channel):
            return "vendor"
        return "modelopt"

    def recipe_route(self, recipe: Recipe, support: TargetSupport, profile: str) -> RecipeRoute:
        return recipe_route(recipe, support, profile)

    def toolchain(self, profile: str | None) -> ToolchainRef:
        found = get_profile(profile)
        return ToolchainRef(target="trtllm", profile=found.name, image=found.image, versions=found.versions())

    def plan(self, ctx: PlanContext) -> TargetPlan:
        profile = get_profile(ctx.request.profile)
        apply_release_defaults(ctx, profile)
        given, user = read_options(ctx, TrtllmOptions), ctx.user_options(TrtllmOptions)
        tp, pp = _parallelism(ctx, given)
        limits = family_limits(ctx.support.trtllm_example, profile.tensorrt_llm)
        dtype = _dtype(ctx, limits, profile)
        max_input_len, max_output_len, max_seq_len = resolve_lengths(ctx, profile, given, user)
        tokens_per_block = _tokens_per_block(ctx, given, user, profile.tensorrt_llm)
        _check_legacy_storage(ctx, given, dtype, profile)
        _check_gpu(ctx, limits)
        custom_all_reduce = _custom_all_reduce(ctx, given, user, profile.tensorrt_llm)
        rotary_base, rotary_dim, scaling_type, scaling_factor = _rotary(ctx.spec, given)
        _check_since(ctx, scaling_type, profile)
        route, writer = _route_and_writer(ctx, self.checkpoint_route(ctx.support, ctx.spec, ctx.options), profile, pp)
        build = TrtllmBuild(
            tp=tp, pp=pp, dtype=dtype, gemm_plugin=dtype, gpt_attention_plugin=dtype,
            max_input_len=max_input_len, max_output_len=max_output_len, max_seq_len=max_seq_len,
            # An unparsable value is already an error finding; plan on with the option table's default.
            max_batch_size=given.max_rolling_batch_size or _table_default_int("max_rolling_batch_size"),
            max_num_tokens=given.max_num_tokens, max_beam_width=given.max_beam_width or 1,
            tokens_per_block=tokens_per_block,
            use_paged_context_fmha=bool(given.use_paged_context_fmha) or bool(given.enable_kv_cache_reuse),
            use_fused_mlp=given.use_fused_mlp, multi_block_mode=given.multi_block_mode,
            use_custom_all_reduce=custom_all_reduce, enable_kv_cache_reuse=bool(given.enable_kv_cache_reuse),
            rotary_base=rotary_base, rotary_dim=rotary_dim, rotary_scaling_type=scaling_type,
            rotary_scaling_factor=scaling_factor,
            model_version={key.removeprefix("option."): value for key, value in ctx.version_options.items()},
            checkpoint_route=route, checkpoint_writer=writer, modelopt_decoder=ctx.support.modelopt_decoder,
            trtllm_architecture=checkpoint_architecture(ctx.support.trtllm_architecture, profile.tensorrt_llm),
            trtllm_example=ctx.support.trtllm_example,
        )
        _check_steps(ctx, build, profile)
        _write_serving_options(ctx, profile, given, build, engine=self.engine)
        _state_smoothquant_granularity(ctx, profile)
        _check_startup(ctx, profile, build)
        return TargetPlan(
            build=build, dtype=dtype, checkpoint_work=checkpoint_work(build, ctx.quantization),
            toolchain=self.toolchain(profile.name),
            workload=Workload(batch_size=build.max_batch_size, seq_len=max_seq_len, tp=tp, pp=pp,
                              paged=paged_kv_cache(ctx, profile, build),
                              tied_head_written=ctx.spec.tie_word_embeddings and lm_head_written(
                                  tied=True, route=route, decoder=build.modelopt_decoder, example=build.trtllm_example)),
        )


def _parallelism(ctx: PlanContext, given: TrtllmOptions) -> tuple[int, int]:
    """(tp, pp), checked against the model's heads and layers."""
    pp = given.pipeline_parallel_degree or 1
    tp = checks.resolve_tp(ctx, pp=pp)
    checks.check_tp_heads(ctx, tp)
    checks.check_rope_scaling_type(ctx)
    checks.check_kv_heads_gpu(ctx, tp)
    if pp > ctx.spec.num_layers:
        ctx.findings.error("pp_layers", f"pp={pp} is more than the model's {ctx.spec.num_layers} layers",
                           hint=f"use --pp <= {ctx.spec.num_layers}")
    return tp, pp


def _dtype(ctx: PlanContext, limits: FamilyLimits | None, profile: ContainerProfile) -> str:
    """The dtype, of those the family's example lists (``data/families.toml``): the user's is refused, a
    default becomes the first listed one."""
    dtype = checks.resolve_dtype(ctx)
    if limits is None or not limits.dtypes or dtype in limits.dtypes:
        return dtype
    listed, family = limits.dtypes, ctx.support.trtllm_example
    what = (f"TensorRT-LLM {profile.tensorrt_llm}'s {family} example lists only "
            f"{', '.join(checks.lmi_dtype(d) for d in listed)} (its README's support matrix, data/families.toml)")
    if ctx.user_options(TrtllmOptions).dtype is not None:
        ctx.findings.error("family_dtype", f"option.dtype={checks.lmi_dtype(dtype)}: {what}",
                           hint=f"plan with --dtype {checks.lmi_dtype(listed[0])}")
        return dtype
    ctx.findings.warn("family_dtype_default", f"the default dtype {checks.lmi_dtype(dtype)} is planned as "
                      f"{checks.lmi_dtype(listed[0])}: {what}",
                      hint=f"pass --dtype {checks.lmi_dtype(listed[0])} to choose it yourself")
    return listed[0]


def _tokens_per_block(ctx: PlanContext, given: TrtllmOptions, user: TrtllmOptions, version: str) -> int | None:
    """The KV-cache block size; a default below what the version's build script asserts is raised."""
    value, minimum = given.tokens_per_block, flag_table(version).limits.context_fmha_min_tokens_per_block
    if minimum is None or value is None or value >= minimum:
        return value
    what = (f"TensorRT-LLM {version}'s build.py asserts tokens_per_block >= {minimum} with context FMHA "
            "(which in-flight batching needs)")
    if user.tokens_per_block is not None:
        ctx.findings.error("tokens_per_block_min", f"tokens_per_block={value}: {what}",
                           hint=f"set option.tokens_per_block to {minimum} or more")
        return value
    ctx.findings.warn("tokens_per_block_fitted", f"the default tokens_per_block={value} raised to {minimum}: {what}",
                      hint=f"set option.tokens_per_block (>= {minimum}) to choose it yourself")
    ctx.write_options(TrtllmOptions(tokens_per_block=minimum), f"TensorRT-LLM {version} minimum with context FMHA")
    return minimum


def _check_legacy_storage(ctx: PlanContext, given: TrtllmOptions, dtype: str, profile: ContainerProfile) -> None:
    """0.7.x SmoothQuant converts with hf_llama_convert.py, whose --storage-type has no bf16."""
    storage, storage_types = checks.lmi_dtype(dtype), flag_table(profile.tensorrt_llm).limits.hf_convert_storage_types
    if (profile.workflow == "legacy" and given.quantize == "smoothquant" and storage_types is not None
            and storage not in storage_types):
        ctx.findings.error("smoothquant_dtype",
                           f"SmoothQuant with TensorRT-LLM {profile.tensorrt_llm} converts with hf_llama_convert.py, "
                           f"which stores only {', '.join(storage_types)}, not {storage}",
                           hint="plan with --dtype fp16, or pick a profile with TensorRT-LLM >= 0.8")


def _gpus_from(minimum: int) -> str:
    """The GPUs (and instance families) of an SM and newer, for the messages of _check_gpu."""
    return {89: "L4, L40S, H100, H200: g6, g6e, p5", 90: "H100, H200: p5, p5e"}[90 if minimum >= 90 else 89]


def _check_gpu(ctx: PlanContext, limits: FamilyLimits | None) -> None:
    """What needs a newer GPU than the target may be: FP8 (weights or KV cache), and a family whose
    kernels need a minimum SM (``data/families.toml``). Refuse a known GPU without it (--gpu, or
    --instance-type's GPU), say what is needed when the GPU is unknown (``planning.gpus``, the table
    verify uses too)."""
    quant = ctx.quantization
    # (code of the refusal, what needs it, the oldest SM)
    needs = [("gpu_quant", f"{what} quantization", minimum)
             for what, minimum in sm_requirements(quant.quant_algo, quant.kv_cache_quant_algo)]
    if limits is not None and limits.min_sm is not None:
        needs.append(("gpu_family", f"{limits.needs or 'the kernels'} of TensorRT-LLM's {ctx.support.trtllm_example} "
                      "example (data/families.toml)", limits.min_sm))
    given = ctx.request.own(TrtllmRequest).gpu
    try:
        given_sm = normalize_sm(given) if given else None
    except OptionError as error:
        ctx.findings.error("gpu", error.message, hint=error.hint)
        return
    gpu = _serving_gpu(ctx, given, given_sm)
    for code, what, minimum in needs:
        if gpu is None:
            ctx.findings.warn("gpu_requirement", f"{what} runs only on GPUs of sm{minimum} or newer "
                              f"({_gpus_from(minimum)})",
                              hint="pass --gpu or --instance-type to check the target GPU at plan time")
        elif sm_number(gpu[0]) < minimum:
            ctx.findings.error(code, f"{what} needs sm{minimum} or newer; {gpu[1]} ({gpu[0]})",
                               hint=f"pick an sm{minimum}+ GPU ({_gpus_from(minimum)})"
                               + (" or another quantization" if code == "gpu_quant" else ""))


def _serving_gpu(ctx: PlanContext, given: str | None, given_sm: str | None) -> tuple[str, str] | None:
    """(sm, how the user named it) of the GPU the artifact is served on: --instance-type's, which --gpu
    (``given``, of ``given_sm``) must not contradict, else --gpu's."""
    if ctx.instance is None or ctx.instance.accelerator.sm is None:
        return (given_sm, f"--gpu {given}") if given_sm is not None else None
    accelerator = ctx.instance.accelerator
    on_instance = (normalize_sm(accelerator.sm or ""), f"{ctx.instance.name} has {accelerator.description}")
    if given_sm is not None and given_sm != on_instance[0]:
        ctx.findings.error("gpu_instance", f"--gpu {given} ({given_sm}) contradicts --instance-type "
                           f"{ctx.instance.name}, which has {accelerator.description} ({on_instance[0]})",
                           hint="drop --gpu (the instance type names its GPU), or pick an instance type "
                           f"with {given} GPUs")
    return on_instance


def _custom_all_reduce(ctx: PlanContext, given: TrtllmOptions, user: TrtllmOptions, version: str) -> bool | None:
    """option.use_custom_all_reduce, gone in TensorRT-LLM 0.12 (a 0.12 pre-release counts as 0.12, as in
    flags.py): from then on none, and a warning when the user set it."""
    if release(version) < (0, 12):
        return given.use_custom_all_reduce
    if given.use_custom_all_reduce is not None and user.use_custom_all_reduce is not None:
        ctx.findings.warn("option_removed",
                          f"option.use_custom_all_reduce is gone in TensorRT-LLM {version} "
                          "(the all-reduce strategy is chosen at run time)",
                          hint="remove option.use_custom_all_reduce")
    return None


def _rotary(spec: ModelSpec, given: TrtllmOptions) -> tuple[float | None, int | None, str | None, float | None]:
    """(base, dim, scaling type, scaling factor) of the RoPE: the options', else the model's."""
    rope = spec.rope
    return (given.rotary_base or (rope.theta if rope and spec.position_embedding == "rope" else None),
            given.rotary_dim or (rope.rotary_dim if rope else None),
            given.rotary_scaling_type or (rope.scaling_type if rope else None),
            given.rotary_scaling_factor or (rope.scaling_factor if rope else None))


def _check_since(ctx: PlanContext, scaling_type: str | None, profile: ContainerProfile) -> None:
    """A RoPE scaling the profile's TensorRT-LLM cannot read, or an architecture its model table lacks
    (``data/since.toml``), is refused, naming the oldest profile that has it."""
    for code, entry in (("rope_scaling_version", missing_scaling(scaling_type, profile.tensorrt_llm)),
                        ("architecture_version",
                         missing_architecture(ctx.support.trtllm_architecture, profile.tensorrt_llm))):
        if entry is not None:
            message, hint = refusal(entry, profile.name, profile.tensorrt_llm)
            ctx.findings.error(code, message, hint=hint)


def _route_and_writer(ctx: PlanContext, route: Literal["modelopt", "vendor"], profile: ContainerProfile,
                      pp: int) -> tuple[Literal["modelopt", "vendor"], Literal["modelopt", "stream"]]:
    """The route ``checkpoint_route`` picks, unless ModelOpt would write an architecture the release lacks;
    and the ModelOpt route's writer: streamed where the architecture's tensors map."""
    if route == "modelopt" and written_otherwise(ctx.support.trtllm_architecture, profile.tensorrt_llm):
        # ModelOpt writes the HF architecture, which this release's MODEL_MAP lacks; its own converter
        # writes the name the release has (data/since.toml written_as).
        route = "vendor"
    if route == "modelopt" and pp > 1 and ctx.spec.num_layers % pp:
        # nvidia-modelopt 0.47.0 postprocess.py:275 asserts num_layers % pp == 0.
        ctx.findings.error("pp_layers_uneven",
                           f"pp={pp} does not divide the model's {ctx.spec.num_layers} layers; ModelOpt's "
                           "exporter gives every pipeline rank the same number of layers",
                           hint="use a --pp that divides the layer count")
    quantized = read_options(ctx.options, TrtllmOptions).quantize is not None
    return route, "stream" if route == "modelopt" and streamable(ctx.spec.architecture, quantized=quantized) else "modelopt"


def _check_steps(ctx: PlanContext, build: TrtllmBuild, profile: ContainerProfile) -> None:
    """A plan is valid only if its vendor steps can be generated for the profile's TensorRT-LLM:
    the same generator the build runs, so `valid` never names a route the tools lack."""
    if ctx.findings.errors:
        return  # the knobs are already wrong; the steps would only repeat it
    try:
        plan_steps(StepInputs(build=build, quantization=ctx.quantization, recipe=ctx.recipe.name,
                              given=ctx.user_options(TrtllmOptions)), profile)
    except LmiBuildError as error:
        ctx.findings.error("trtllm_route", error.message, hint=error.hint)


def _write_serving_options(ctx: PlanContext, profile: ContainerProfile, given: TrtllmOptions, build: TrtllmBuild,
                           *, engine: str) -> None:
    """serving.properties for the engines: the profile's process layout, then the build's parallelism,
    dtype and shapes."""
    if profile.layout == "flat":
        ctx.write_options(TrtllmOptions(engine=FLAT_ENGINE),
                          f"profile {profile.name}: one LLM API process (not engine=MPI)")
        # The TensorRT-LLM 1.x LMI handler is only picked when these are explicit.
        ctx.write_options(TrtllmOptions(entry_point="djl_python.lmi_trtllm.trtllm_async_service",
                                        async_mode=True, rolling_batch="disable"), f"profile {profile.name}")
        if given.mpi_mode:
            # engine=MPI (the alias sets mpi_mode=true): every rank would construct LLM(...) with
            # the whole tp (layouts.FLAT_ENGINE's sources).
            ctx.write_options(TrtllmOptions(mpi_mode=False), f"profile {profile.name}: its one LLM API process "
                              "starts its own MPI ranks; mpi_mode=true would start a whole model in every rank")
        if build.pp > 1 or given.pipeline_parallel_size is not None:
            # The 1.x service passes pipeline_parallel_size, not pipeline_parallel_degree, to LLM()
            # (djl-serving 0.33.0-dlc properties_manager/trt_properties.py:42,138).
            ctx.write_options(TrtllmOptions(pipeline_parallel_size=build.pp),
                              f"profile {profile.name}: the LLM API service's key for pp")
    else:
        ctx.write_options(TrtllmOptions(engine=engine, rolling_batch="trtllm"), "trtllm target")
    ctx.write_options(TrtllmOptions(tensor_parallel_degree=build.tp), "resolved tp")
    if build.pp > 1:
        ctx.write_options(TrtllmOptions(pipeline_parallel_degree=build.pp), "resolved pp")
    ctx.write_options(TrtllmOptions(dtype=checks.lmi_dtype(build.dtype)), "resolved dtype")
    ctx.write_options(TrtllmOptions(max_input_len=build.max_input_len, max_output_len=build.max_output_len,
                                    max_rolling_batch_size=build.max_batch_size), "build knob")


def _state_smoothquant_granularity(ctx: PlanContext, profile: ContainerProfile) -> None:
    """serving.properties says what the engine has: a W8A8_SQ_PER_CHANNEL* engine (ModelOpt's
    SmoothQuant, or convert_checkpoint.py --per_channel) has per-channel weight scales
    (tensorrt_llm/quantization/mode.py QuantAlgo, @5955b8af:208, @250d9c29:29, @05316d33:29,
    @28fb9aac:29), whatever the option table's default says. 0.7's legacy build.py takes the plan's
    per_channel as it is (--per_channel only when set), so its properties already agree."""
    algo = ctx.quantization.quant_algo or ""
    if profile.workflow != "legacy" and algo.startswith("W8A8_SQ_PER_CHANNEL"):
        ctx.write_options(TrtllmOptions(smoothquant_per_channel=True), f"the engine's quant_algo {algo}")


def _check_startup(ctx: PlanContext, profile: ContainerProfile, build: TrtllmBuild) -> None:
    """The release's start-up on the artifact this plan writes (``startup.evaluate``, which
    ``verify --for-container`` evaluates on the built one): every rule that makes it rebuild,
    reject, or serve otherwise than built is an error, a belief read in a runtime a warning. A defect of
    the release's own service that refuses every artifact (``runtime_defect``, executed at 0.35-0.36) is a
    warning here: no plan avoids it, the artifact is still the one the release's engine route loads (a
    patched image or an own entryPoint serves it), and ``verify --for-container`` reports it as an error."""
    if ctx.findings.errors:
        return  # the plan is already refused; its knobs would only repeat it (as _check_steps)
    inputs = from_planned(*ctx.written_properties(), build, ctx.quantization, profile)
    errors, warnings = outcome_messages(evaluate(profile, inputs))
    ctx.findings.add_errors([e for e in errors if e.code != RELEASE_DEFECT])
    ctx.findings.add_warnings([e for e in errors if e.code == RELEASE_DEFECT] + warnings)


def _table_default_int(key: str) -> int:
    """The option table's (``data/options.toml``) default of an int option the trtllm target always sets."""
    spec = option_spec(key)
    default = spec.default_for("trtllm") if spec is not None else None
    if default is None:
        raise AssertionError(f"data/options.toml has no trtllm default for option.{key}")
    return int(default)


def checkpoint_work(build: TrtllmBuild, quantization: QuantizationPlan) -> CheckpointWork | None:
    """The ModelOpt route converts (or quantizes) on this host; the vendor route converts in the
    container, and a pre-quantized input is converted there too."""
    if quantization.pre_quantized is not None or build.checkpoint_route != "modelopt" or not build.modelopt_decoder:
        return None
    return CheckpointWork(family="trtllm", dtype=build.dtype, streamed=build.checkpoint_writer == "stream")
