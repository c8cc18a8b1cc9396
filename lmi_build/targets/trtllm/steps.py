"""From a plan and a container profile to the ordered commands that produce the engines.

Steps are data: argv lists whose directory arguments are placeholders (``{model}``,
``{checkpoint}``, ``{engine}``, ``{examples}``, ``{workers}``) that each runner binds to its own
paths (host directories, container mounts, or shell variables). Every vendor argv is validated
against the flag table of the profile's TensorRT-LLM version before it is returned.
"""

from pathlib import Path
from typing import cast

from lmi_build.core.errors import UnsupportedTarget
from lmi_build.core.types import FrozenModel
from lmi_build.options.spec import full_key
from lmi_build.planning.checks import lmi_dtype
from lmi_build.planning.plan import BuildPlan, QuantizationPlan
from lmi_build.reporting.output import current
from lmi_build.runners.bundle import (
    BundleSpec,
    Requirement,
    bundle_script,
    gpu_requirement,
    nvidia_runtime_requirement,
)
from lmi_build.runners.script import ScriptRunner
from lmi_build.runners.step import Dir, Paths, Step
from lmi_build.targets.trtllm.flags import FlagError, FlagTable, Tool, flag_table
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.options import TrtllmOptions, given_options
from lmi_build.targets.trtllm.profiles import ContainerProfile

# The directories TensorRT-LLM steps use: their container mounts and the variables build-engines.sh reads.
DIRS = {
    "model": Dir(mount="/work/model", variable="MODEL_DIR"),
    "checkpoint": Dir(mount="/work/checkpoint", variable="CHECKPOINT_DIR"),
    "engine": Dir(mount="/work/engine", variable="ENGINE_DIR"),
    "examples": Dir(mount="/work/trtllm-examples", variable="TRTLLM_EXAMPLES"),
}
DEFAULT_EXAMPLES = "./TensorRT-LLM/examples"  # build-engines.sh: where a TensorRT-LLM checkout is expected


def trtllm_paths(*, model: Path, checkpoint: Path, engine: Path, examples: Path | None = None) -> Paths:
    """The host directories of a TensorRT-LLM build, with the mounts and variables above."""
    return Paths(DIRS, model=model, checkpoint=checkpoint, engine=engine, examples=examples)


MODELOPT_EXPORT = "the ModelOpt checkpoint export"
CHECKPOINT_TIMEOUT_S = 3 * 3600
BUILD_TIMEOUT_S = 4 * 3600
# The legacy (0.7.x) scripts and the SmoothQuant converter exist for the Llama example only here.
LEGACY_EXAMPLES = ("llama",)
# Encoder-decoder examples build two engines (encoder; decoder with --max_input_len 1, T5 without context
# FMHA: examples/enc_dec/README.md) in a layout this target does not write: refused, never one wrong engine.
ENCODER_DECODER_EXAMPLES = ("enc_dec",)


class StepPlan(FrozenModel):
    steps: list[Step]
    warnings: list[str]
    flag_series: str


class StepInputs(FrozenModel):
    """What the steps are generated from: a saved plan's parts, or the planner's while it plans
    (so a plan is only valid when its steps can be generated)."""

    build: TrtllmBuild
    quantization: QuantizationPlan
    recipe: str
    # The options the user gave (not the option table's or the recipe's default): only dropping one is news.
    given: TrtllmOptions

    @classmethod
    def of(cls, plan: BuildPlan) -> "StepInputs":
        return cls(build=plan.knobs(TrtllmBuild), quantization=plan.quantization, recipe=plan.recipe,
                   given=given_options(plan.options, plan.option_sources))


def plan_steps(plan: BuildPlan | StepInputs, profile: ContainerProfile) -> StepPlan:
    """The ordered steps for ``plan`` on ``profile`` plus the warnings about dropped flags."""
    if isinstance(plan, BuildPlan):
        plan = StepInputs.of(plan)
    build = plan.build
    if not profile.engine_capable:
        raise UnsupportedTarget(f"profile {profile.name} (TensorRT-LLM {profile.tensorrt_llm}) cannot build engines",
                                hint="pick an engine-capable profile (lmi-build profiles list)")
    table = flag_table(profile.tensorrt_llm)
    if build.trtllm_example in ENCODER_DECODER_EXAMPLES:
        raise UnsupportedTarget(f"encoder-decoder models ({build.trtllm_architecture}) need an encoder and a decoder "
                                f"engine; lmi-build does not build that pair for profile {profile.name}",
                                hint="serve this model with `lmi-build hf` (no engine), or build it with the "
                                     "vendor's examples/enc_dec scripts")
    warnings: list[str] = []
    if profile.workflow == "legacy":
        steps = _legacy_steps(plan, build, table, warnings)
    else:
        steps = [*_checkpoint_steps(plan, build, table), _trtllm_build_step(plan, build, table, warnings)]
    for step in steps:
        if step.tool is not None:
            problems = table.validate_argv(cast(Tool, step.tool), _flags_part(step.argv))
            if problems:
                raise FlagError(f"step '{step.name}' is invalid for TensorRT-LLM {profile.tensorrt_llm}: "
                                + "; ".join(problems), hint="report this: the flag table and step generator disagree")
    return StepPlan(steps=steps, warnings=warnings, flag_series=table.series)


def engine_steps(plan: BuildPlan | StepInputs, profile: ContainerProfile) -> list[Step]:
    """The steps, with each dropped-flag warning printed once (``lmi_build.reporting.output``)."""
    result = plan_steps(plan, profile)
    for warning in result.warnings:
        current().warn(warning)
    return result.steps


def _flags_part(argv: list[str]) -> list[str]:
    """The flags of a vendor argv: everything after the program (``trtllm-build`` or ``python3 X.py``)."""
    if argv and argv[0] == "trtllm-build":
        return argv[1:]
    return argv[2:] if len(argv) >= 2 and argv[0].startswith("python") else argv


class _Args:
    """An argv under construction that only takes flags the version has."""

    def __init__(self, table: FlagTable, tool: Tool, program: list[str]) -> None:
        self.table, self.tool, self.argv = table, tool, list(program)

    def has(self, flag: str) -> bool:
        return self.table.has(self.tool, flag)

    def add(self, flag: str, *values: object) -> None:
        self.argv.append(f"--{flag}")
        self.argv.extend(str(v) for v in values)

    def add_when(self, flag: str, on: bool | None) -> None:
        if on:
            self.add(flag)

    def add_unless_none(self, flag: str, value: object | None) -> None:
        if value is not None:
            self.add(flag, value)

    def switch(self, flag: str, on: bool) -> None:
        """A boolean feature in the version's own form: ``--flag`` or ``--flag enable|disable``."""
        if self.table.kind(self.tool, flag) == "store_true":
            self.add_when(flag, on)
        else:
            self.add(flag, "enable" if on else "disable")

    def weight_only(self, precision: str, *, per_group: bool = False) -> None:
        """The weight-only flags, spelled alike by convert_checkpoint.py and 0.7's build.py."""
        self.add("use_weight_only")
        self.add("weight_only_precision", precision)
        self.add_when("per_group", per_group)

    def shapes(self, build: TrtllmBuild) -> None:
        """The engine's shapes; a tool without --max_seq_len (0.7's build.py, trtllm-build before 0.11)
        takes --max_output_len."""
        self.add("max_batch_size", build.max_batch_size)
        self.add("max_input_len", build.max_input_len)
        if self.has("max_seq_len"):
            self.add("max_seq_len", build.max_seq_len)
        else:
            self.add("max_output_len", build.max_output_len)
        self.add("max_beam_width", build.max_beam_width)
        self.add_unless_none("max_num_tokens", build.max_num_tokens)

    def checkpoint_step(self) -> Step:
        """The step that writes the checkpoint from the model with this argv, in the container."""
        return Step(name="checkpoint", argv=self.argv, where="container", tool=self.tool,
                    inputs=["model", "examples"], outputs=["checkpoint"], timeout_s=CHECKPOINT_TIMEOUT_S)


def _dtype_value(dtype: str | None) -> str:
    return dtype if dtype else "disable"


# The weight-only methods and the precision the vendor scripts name them by.
WEIGHT_ONLY_PRECISION = {"int8_wo": "int8", "int4_wo": "int4"}


# ---- >= 0.8: checkpoint (ModelOpt on the host, or the vendor scripts in the container) ----

def _checkpoint_steps(plan: StepInputs, build: TrtllmBuild, table: FlagTable) -> list[Step]:
    quant = plan.quantization
    if build.checkpoint_route == "modelopt" and quant.pre_quantized is None:
        return [Step(name="checkpoint", argv=["lmi-build-modelopt-export", "--model_dir", "{model}", "--output_dir",
                                              "{checkpoint}", "--dtype", build.dtype, "--tp_size", str(build.tp),
                                              "--pp_size", str(build.pp),
                                              *(["--quant_algo", quant.quant_algo] if quant.quant_algo else [])],
                     where="host", in_process=MODELOPT_EXPORT, inputs=["model"], outputs=["checkpoint"],
                     timeout_s=CHECKPOINT_TIMEOUT_S)]
    example = _vendor_example(plan, build, table)
    method = quant.method
    if method in ("awq", "fp8") and quant.pre_quantized is None:
        return [_quantize_script_step(build, table, method, quant)]
    return [_convert_checkpoint_step(build, quant, table, example)]


def _converter(table: FlagTable, example: str) -> str:
    return f"examples/{table.example_dir(example)}/convert_checkpoint.py of TensorRT-LLM {table.series}"


def _vendor_example(plan: StepInputs, build: TrtllmBuild, table: FlagTable) -> str:
    """The recipe's example, whose converter must be one the flag table read and can split the plan's
    ranks (flags.toml limits)."""
    example = build.trtllm_example
    if not example:
        raise UnsupportedTarget(f"recipe {plan.recipe} names no TensorRT-LLM example for the vendor converter",
                                hint="add trtllm_example to the recipe or use the ModelOpt route")
    limits, converter = table.limits, _converter(table, example)
    # (the examples the limit lists, whether the plan needs what they lack, the refusal, its hint)
    refusals = (
        (limits.unread_converters, True,
         f"{converter} was not read, so lmi-build does not know its flags (flags.toml limits unread_converters)",
         "plan with a profile of a newer TensorRT-LLM (lmi-build profiles list)"),
        (limits.single_rank_examples, build.tp * build.pp > 1,
         f"{converter} takes no --tp_size/--pp_size and writes a one-rank checkpoint; the plan has tp {build.tp}, "
         f"pp {build.pp} (flags.toml limits single_rank_examples)",
         "plan with --tp 1 --pp 1, or with a profile of a newer TensorRT-LLM"),
        (limits.single_pp_examples, build.pp > 1, f"{converter} asserts pp_size == 1; the plan has pp {build.pp}",
         "plan with --pp 1 (tensor parallelism only)"),
    )
    for listed, needed, message, hint in refusals:
        if needed and example in (listed or ()):
            raise UnsupportedTarget(message, hint=hint)
    return example


def _convert_checkpoint_step(build: TrtllmBuild, quant: QuantizationPlan, table: FlagTable, example: str) -> Step:
    args = _Args(table, "convert_checkpoint",
                 ["python3", f"{{examples}}/{table.example_dir(example)}/convert_checkpoint.py"])
    _converter_layout_args(args, build, table, example)
    variant = table.variants.get(example)
    if variant is not None and variant.option in build.model_version:
        # Each converter names the model's variant its own way (flags.toml [variants]); an unknown flag
        # fails plan_steps' validation instead of reaching argparse.
        args.add(variant.flag, variant.value(build.model_version[variant.option]))
    elif build.model_version:
        # Without its variant flag a converter guesses the variant from the model directory's name
        # (examples/chatglm load_chatglm_config, examples/gpt load_gpt_config): a local directory's path.
        options = ", ".join(full_key(key) for key in sorted(build.model_version))
        raise UnsupportedTarget(f"{_converter(table, example)} has no flag lmi-build knows for {options} "
                                "(flags.toml [variants])",
                                hint="plan with a profile of a newer TensorRT-LLM (lmi-build profiles list)")
    _converter_quantization_args(args, quant, table)
    lacking = [flag for flag in (table.limits.converter_lacks or {}).get(example, ())
               if f"--{flag}" in _flags_part(args.argv)]
    if lacking:
        raise UnsupportedTarget(f"{_converter(table, example)} has no working {', '.join('--' + f for f in lacking)} "
                                "(flags.toml limits converter_lacks)",
                                hint="plan without the option that needs it, or with a profile of a newer TensorRT-LLM")
    return args.checkpoint_step()


def _converter_layout_args(args: _Args, build: TrtllmBuild, table: FlagTable, example: str) -> None:
    """The converter's fixed flags, directories, dtype and parallelism, in its own spelling (flags.toml spellings)."""
    spelling = table.spelling(example)
    if build.pp > 1 and spelling.pp_size is None:
        raise UnsupportedTarget(f"{_converter(table, example)} takes tensor parallelism only (no pipeline-parallel "
                                f"flag); the plan has pp {build.pp} (flags.toml spellings)", hint="plan with --pp 1")
    for fixed, value in spelling.fixed.items():
        args.add(fixed, value)
    args.add(spelling.model_dir, "{model}")
    args.add(spelling.output_dir, "{checkpoint}")
    args.add("dtype", build.dtype)
    if example in (table.limits.single_rank_examples or ()):
        return  # a one-rank converter takes no parallelism flags (_vendor_example refused tp * pp > 1)
    for parallel, number in ((spelling.tp_size, build.tp), (spelling.pp_size, build.pp)):
        if parallel is not None:
            args.add(parallel, number)
    if spelling.workers is not None and args.has(spelling.workers):
        args.add(spelling.workers, "{workers}")


def _converter_quantization_args(args: _Args, quant: QuantizationPlan, table: FlagTable) -> None:
    pre, method = quant.pre_quantized, quant.method
    if pre is not None:
        _prequantized_args(args, pre.method, table, quant.group_size or pre.group_size)
    elif method == "smoothquant":
        args.add("smoothquant", quant.smoothquant_alpha if quant.smoothquant_alpha is not None else 0.5)
        args.add_when("per_token", quant.per_token)
        args.add_when("per_channel", quant.per_channel)
    elif method in WEIGHT_ONLY_PRECISION:
        args.weight_only(WEIGHT_ONLY_PRECISION[method])
    elif method is not None:
        raise UnsupportedTarget(f"quantization '{method}' has no vendor convert_checkpoint route",
                                hint="use the ModelOpt checkpoint route")
    args.add_when("int8_kv_cache", quant.kv_cache_quant_algo == "INT8")


# The vendor converter opens ONE .safetensors file of a pre-quantized GPTQ model (safe_open), not the
# directory; AutoGPTQ saves it as model.safetensors (the build checks the file is there).
GPTQ_FILE = "model.safetensors"
GPTQ_PATH_FLAGS = ("quant_ckpt_path", "modelopt_quant_ckpt_path", "ammo_quant_ckpt_path")


def _prequantized_args(args: _Args, method: str, table: FlagTable, group_size: int | None = None) -> None:
    if method == "gptq":
        args.weight_only("int4_gptq", per_group=True)
        if group_size is not None and args.has("group_size"):
            args.add("group_size", group_size)  # the converter's default is 128, whatever the model has
        # --ammo_quant_ckpt_path at 0.8/0.9, --modelopt_quant_ckpt_path at 0.10, --quant_ckpt_path later (flags.toml).
        flag = next((f for f in GPTQ_PATH_FLAGS if args.has(f)), GPTQ_PATH_FLAGS[0])
        args.add(flag, f"{{model}}/{GPTQ_FILE}")
    elif method == "awq":
        # The converter takes AutoAWQ from the model's quantization_config (flags.toml limits); it has
        # no --use_autoawq flag. The weight-only flags only restate what that config sets.
        if not table.limits.awq_from_quantization_config:
            raise UnsupportedTarget(f"AutoAWQ checkpoints need TensorRT-LLM >= 0.16 (this profile has {table.series})",
                                    hint="pick a newer profile or start from the unquantized model")
        args.weight_only("int4_gptq", per_group=True)
    else:
        raise UnsupportedTarget(f"pre-quantized '{method}' checkpoints cannot be converted by convert_checkpoint.py",
                                hint="start from the unquantized model")


def _quantize_script_step(build: TrtllmBuild, table: FlagTable, method: str, quant: QuantizationPlan) -> Step:
    """examples/quantization/quantize.py's checkpoint: 0.7's script exports to --export_path and takes
    neither the AWQ block size nor the ranks."""
    args = _Args(table, "quantize", ["python3", "{examples}/quantization/quantize.py"])
    args.add("model_dir", "{model}")
    args.add("dtype", build.dtype)
    args.add("qformat", {"awq": "int4_awq", "fp8": "fp8"}[method])
    if method == "awq" and args.has("awq_block_size"):
        args.add("awq_block_size", quant.group_size or 128)
    args.add("output_dir" if args.has("output_dir") else "export_path", "{checkpoint}")
    args.add("calib_size", (quant.calibration.size if quant.calibration else None) or (32 if method == "awq" else 512))
    if args.has("tp_size"):
        args.add("tp_size", build.tp)
        args.add("pp_size", build.pp)
    return args.checkpoint_step()


# ---- >= 0.8: trtllm-build ----

def _trtllm_build_step(plan: StepInputs, build: TrtllmBuild, table: FlagTable, warnings: list[str]) -> Step:
    args = _Args(table, "trtllm_build", ["trtllm-build"])
    args.add("checkpoint_dir", "{checkpoint}")
    args.add("output_dir", "{engine}")
    args.add("workers", "{workers}")
    args.shapes(build)
    args.add("gemm_plugin", _dtype_value(build.gemm_plugin))
    args.add("gpt_attention_plugin", _dtype_value(build.gpt_attention_plugin))
    if args.has("paged_kv_cache"):
        # 0.8-0.11 need these spelled out for in-flight batching (the LMI rolling batch).
        for feature in ("context_fmha", "paged_kv_cache", "remove_input_padding"):
            args.switch(feature, True)
    args.add_unless_none("tokens_per_block", build.tokens_per_block)
    if build.use_paged_context_fmha:
        args.switch("use_paged_context_fmha", True)
    if build.use_fused_mlp is not None:
        args.switch("use_fused_mlp", build.use_fused_mlp)
    for flag, value, given in (("multi_block_mode", build.multi_block_mode, plan.given.multi_block_mode),
                               ("use_custom_all_reduce", build.use_custom_all_reduce, plan.given.use_custom_all_reduce)):
        if value is None:
            continue
        if args.has(flag):
            args.switch(flag, value)
        elif given is not None:
            removal = table.removed.get(flag)
            why = removal.message if removal else f"not a trtllm-build flag in {table.series}"
            warnings.append(f"{flag}={str(value).lower()} dropped from trtllm-build: {why}")
    return Step(name="engine", argv=args.argv, where="container", tool="trtllm_build",
                inputs=["checkpoint"], outputs=["engine"], timeout_s=BUILD_TIMEOUT_S)


# ---- 0.7.x: examples/<model>/build.py (+ hf_llama_convert.py / quantize.py) ----

def _legacy_steps(plan: StepInputs, build: TrtllmBuild, table: FlagTable, warnings: list[str]) -> list[Step]:
    example, quant = build.trtllm_example, plan.quantization
    if example not in LEGACY_EXAMPLES:
        raise UnsupportedTarget(f"TensorRT-LLM {table.series} legacy builds support only {', '.join(LEGACY_EXAMPLES)} "
                                f"examples here, not '{example}'",
                                hint="pick a profile with TensorRT-LLM >= 0.8")
    if quant.pre_quantized is not None and quant.pre_quantized.method != "gptq":
        raise UnsupportedTarget(f"pre-quantized {quant.pre_quantized.method} checkpoints cannot be built with "
                                f"TensorRT-LLM {table.series} (its build.py reads GPTQ ones only)",
                                hint="pick a profile with TensorRT-LLM >= 0.16")
    example_dir = table.example_dir(example)
    args = _Args(table, "legacy_build", ["python3", f"{{examples}}/{example_dir}/build.py"])
    checkpoint = _legacy_quantization(args, build, quant, table, example_dir)
    _legacy_engine_args(args, build)
    if build.use_paged_context_fmha:
        warnings.append("use_paged_context_fmha dropped: examples/llama/build.py of TensorRT-LLM 0.7 has no such flag")
    converted = [checkpoint] if checkpoint is not None else []
    return [*converted, Step(name="engine", argv=args.argv, where="container", tool="legacy_build",
                             inputs=["model", "examples", *(["checkpoint"] if converted else [])], outputs=["engine"],
                             timeout_s=BUILD_TIMEOUT_S)]


def _legacy_quantization(args: _Args, build: TrtllmBuild, quant: QuantizationPlan, table: FlagTable,
                         example_dir: str) -> Step | None:
    """build.py's input and quantization flags; the step that converts the model first, where one does."""
    if quant.method == "smoothquant":
        return _legacy_smoothquant_step(args, build, quant, table, example_dir)
    if quant.pre_quantized is None and quant.method not in (None, "awq", *WEIGHT_ONLY_PRECISION):
        raise UnsupportedTarget(f"quantization '{quant.method}' is not available with TensorRT-LLM 0.7",
                                hint="pick a profile with TensorRT-LLM >= 0.8")
    args.add("model_dir", "{model}")
    if quant.method == "awq":
        # AMMO 0.5 writes one .npz named <decoder>_tp1_rank0.npz; build.py splits it per rank.
        args.add("quant_ckpt_path", "{checkpoint}/llama_tp1_rank0.npz")
        args.weight_only("int4_awq", per_group=True)
        return _quantize_script_step(build, table, "awq", quant)
    if quant.pre_quantized is not None:
        # A pre-quantized GPTQ model: build.py takes the config from --model_dir and, with --per_group,
        # the int4 weights from ONE .safetensors file (load_from_gptq_llama), grouped by --group_size.
        args.add("quant_ckpt_path", f"{{model}}/{GPTQ_FILE}")
        args.weight_only("int4_gptq", per_group=True)
        args.add("group_size", quant.group_size or quant.pre_quantized.group_size or 128)
    elif quant.method is not None:
        args.weight_only(WEIGHT_ONLY_PRECISION[quant.method])
    return None


def _legacy_smoothquant_step(args: _Args, build: TrtllmBuild, quant: QuantizationPlan, table: FlagTable,
                             example_dir: str) -> Step:
    """hf_llama_convert.py's SmoothQuant checkpoint, and the flags build.py reads it with."""
    convert = _Args(table, "hf_convert", ["python3", f"{{examples}}/{example_dir}/hf_llama_convert.py"])
    convert.add("i", "{model}")
    convert.add("o", "{checkpoint}")
    convert.add("sq", quant.smoothquant_alpha if quant.smoothquant_alpha is not None else 0.8)
    convert.add("tensor-parallelism", build.tp)
    convert.add("storage-type", _legacy_storage_type(build.dtype, table))
    # The legacy converter's short options are single-dash (-i -o -sq), its long ones double-dash.
    convert.argv[2:] = [a[1:] if a in ("--i", "--o", "--sq") else a for a in convert.argv[2:]]
    args.add("ft_model_dir", f"{{checkpoint}}/{build.tp}-gpu")
    args.add("use_smooth_quant")
    args.add_when("per_token", quant.per_token)
    args.add_when("per_channel", quant.per_channel)
    return convert.checkpoint_step()


def _legacy_engine_args(args: _Args, build: TrtllmBuild) -> None:
    """build.py's engine flags: parallelism, shapes, plugins, the in-flight batching LMI serves, RoPE."""
    args.add("dtype", build.dtype)
    args.add("output_dir", "{engine}")
    args.add("world_size", build.world_size)
    args.add("tp_size", build.tp)
    args.add("pp_size", build.pp)
    args.shapes(build)
    args.add("use_gpt_attention_plugin", _dtype_value(build.gpt_attention_plugin))
    if build.gemm_plugin:
        args.add("use_gemm_plugin", build.gemm_plugin)
    for flag in ("use_inflight_batching", "paged_kv_cache", "remove_input_padding", "enable_context_fmha"):
        args.add(flag)
    args.add_unless_none("tokens_per_block", build.tokens_per_block)
    args.add_when("use_fused_mlp", build.use_fused_mlp)
    args.add_when("multi_block_mode", build.multi_block_mode)
    args.add_when("use_custom_all_reduce", build.use_custom_all_reduce)
    args.add_unless_none("rotary_base", build.rotary_base)
    if build.rotary_scaling_type and build.rotary_scaling_factor:
        args.add("rotary_scaling", build.rotary_scaling_type, build.rotary_scaling_factor)
    args.add_when("parallel_build", build.world_size > 1)


def _legacy_storage_type(dtype: str, table: FlagTable) -> str:
    """hf_llama_convert.py's --storage-type for ``dtype``; the plan refuses the ones it lacks (bf16)."""
    storage = lmi_dtype(dtype)  # hf_llama_convert.py names them as serving.properties does
    allowed = table.limits.hf_convert_storage_types
    if allowed is not None and storage not in allowed:
        raise UnsupportedTarget(f"hf_llama_convert.py of TensorRT-LLM {table.series} stores only "
                                f"{', '.join(allowed)}, not {storage}", hint="plan with --dtype fp16")
    return storage


BUNDLE_SCRIPT = "build-engines.sh"


def engine_bundle(image: str | None, *, tensorrt_llm: str | None = None, header: str = "",
                  gpu: Requirement | None = None) -> BundleSpec:
    """build-engines.sh as the shared bundle writer's data: a GPU (of the plan's SM when it names
    one) and, in docker, the NVIDIA container runtime; the checkout the vendor scripts run from."""
    version = f"TensorRT-LLM {tensorrt_llm}" if tensorrt_llm else "the profile's TensorRT-LLM"
    return BundleSpec(
        script=BUNDLE_SCRIPT, purpose="TensorRT-LLM engine build steps", final="engine", image=image,
        header=header, defaults={"examples": DEFAULT_EXAMPLES},
        dir_fixes={"model": "the model travels in the bundle's model/: copy the whole bundle directory, "
                            "or set MODEL_DIR to the model's directory",
                   "checkpoint": "the checkpoint lmi-build converted travels in the bundle's checkpoint/: copy the "
                                 "whole bundle directory, or set CHECKPOINT_DIR to it",
                   "examples": f"a checkout of {version} (its tag): clone it to ./TensorRT-LLM beside this script, "
                               "or set TRTLLM_EXAMPLES to its examples/"},
        tool_fix=(f"run inside {image} (RUNNER=docker does), or " if image else "")
                 + f"install {version} on this host",
        requirements=(*([nvidia_runtime_requirement()] if image else []), gpu or gpu_requirement()))


def engine_script(runner: ScriptRunner, paths: Paths, *, header: str = "", tensorrt_llm: str | None = None,
                  gpu: Requirement | None = None) -> str:
    """build-engines.sh from the steps ``runner`` has collected."""
    spec = engine_bundle(runner.image, tensorrt_llm=tensorrt_llm, header=header, gpu=gpu)
    return bundle_script(runner, spec, paths)
