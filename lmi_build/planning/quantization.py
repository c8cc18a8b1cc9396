"""Quantization methods as data, and the planning of a quantization step (pure Python, no torch).

Each method says what TensorRT-LLM ``quant_algo`` string the checkpoint will carry, for both
checkpoint routes:

- ``modelopt`` (ours, runs on CPU): what ``modelopt.torch.export`` 0.47 actually writes. ModelOpt
  names every INT4 block-quantized weight ``W4A16_AWQ`` (AWQ and plain round-to-nearest INT4
  alike: same packed layout, group scales and ``pre_quant_scale`` flag) and exports its
  SmoothQuant (per-channel weights, per-tensor static activations) as ``W8A8_SQ_PER_CHANNEL``;
  it never writes the ``*_PLUGIN`` SmoothQuant variants.
- ``vendor`` (TensorRT-LLM ``convert_checkpoint.py`` inside the container): its own mapping,
  e.g. SmoothQuant + per_channel + per_token -> ``W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN``. It
  cannot run AWQ, GPTQ or FP8 calibration itself (those need ModelOpt).

GPTQ is ``W4A16_GPTQ`` (TensorRT-LLM's name for the AutoGPTQ layout) wherever it is built: the hf
target writes that layout; the trtllm target refuses to quantize it (``targets/trtllm/prequantized.py``
says why) and converts only a GPTQ model given as input.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.types import FrozenModel, PlanMessage
from lmi_build.model.spec import ModelSpec, PreQuantization
from lmi_build.options.resolved import ResolvedOptions, Source
from lmi_build.options.spec import exact_spec
from lmi_build.planning import calibration_text
from lmi_build.planning.context import read_options
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import CalibrationPlan, QuantizationPlan
from lmi_build.recipes.registry import load_recipes

Route = Literal["modelopt", "vendor"]
_N = TypeVar("_N", int, float)


class QuantMethod(FrozenModel):
    name: str
    description: str
    quant_algo: str  # what the ModelOpt export writes into config.json "quantization.quant_algo"
    vendor_quant_algo: str | None  # what convert_checkpoint.py writes; None: the vendor route cannot
    modelopt_config: str  # the mtq.<NAME> preset the quantization starts from
    algorithm: str | None = None  # calibration algorithm replacing the preset's (e.g. "gptq")
    group_size: int | None = None  # weight block size along the input dimension
    weight_bits: int
    activation_bits: int | None = None  # None: weight-only
    calibration: bool  # needs a forward pass over calibration data (activation statistics)
    default_calib_size: int | None = None
    # AWQ re-quantizes every weight for each of its 11 alpha candidates on EVERY forward call, so
    # on CPU its cost is per batch rather than per token: 8 samples in one batch ran 7x faster than
    # 8 batches of one on a 1 GB Llama (562 s -> 82 s, docs/notes/quantize.md).
    default_calib_batch_size: int = 1


# Default sample counts are deliberately smaller than upstream's 512: every sample is a full
# forward pass of the model on CPU (a 7B model takes seconds per 512-token sample), and the
# statistics these methods collect (per-tensor activation maxima for SmoothQuant/FP8, per-channel
# activation means for AWQ's scale search, the Hessian X^T X for GPTQ) settle within a few tens of
# thousands of tokens. 64 paragraphs of the built-in set are ~10k tokens; AWQ keeps LMI's
# awq_calib_size default of 32 because its grid search multiplies the cost per sample.
METHODS: dict[str, QuantMethod] = {
    m.name: m
    for m in (
        QuantMethod(
            name="smoothquant",
            description="INT8 weights and activations, SmoothQuant-migrated (W8A8)",
            quant_algo="W8A8_SQ_PER_CHANNEL",
            vendor_quant_algo="W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN",  # see vendor_smoothquant_algo
            modelopt_config="INT8_SMOOTHQUANT_CFG",
            weight_bits=8,
            activation_bits=8,
            calibration=True,
            default_calib_size=64,
        ),
        QuantMethod(
            name="awq",
            description="INT4 weights in groups of 128, activation-aware scales (W4A16 AWQ)",
            quant_algo="W4A16_AWQ",
            vendor_quant_algo=None,
            modelopt_config="INT4_AWQ_CFG",
            group_size=128,
            weight_bits=4,
            calibration=True,
            default_calib_size=32,
            default_calib_batch_size=8,
        ),
        QuantMethod(
            name="gptq",
            description="INT4 weights in groups of 128, GPTQ Hessian-corrected rounding",
            quant_algo="W4A16_GPTQ",
            vendor_quant_algo=None,
            modelopt_config="INT4_BLOCKWISE_WEIGHT_ONLY_CFG",
            algorithm="gptq",
            group_size=128,
            weight_bits=4,
            calibration=True,
            default_calib_size=64,
        ),
        QuantMethod(
            name="fp8",
            description="FP8 (E4M3) weights and activations, per-tensor scales",
            quant_algo="FP8",
            vendor_quant_algo=None,
            modelopt_config="FP8_DEFAULT_CFG",
            weight_bits=8,
            activation_bits=8,
            calibration=True,
            default_calib_size=64,
        ),
        QuantMethod(
            name="int8_wo",
            description="INT8 weight-only, per-channel scales (W8A16)",
            quant_algo="W8A16",
            vendor_quant_algo="W8A16",
            modelopt_config="INT8_WEIGHT_ONLY_CFG",
            weight_bits=8,
            calibration=False,
        ),
        QuantMethod(
            name="int4_wo",
            description="INT4 weight-only, round-to-nearest (ModelOpt: groups of 128; vendor: per-channel)",
            quant_algo="W4A16_AWQ",  # ModelOpt's INT4 export is always blockwise, in the AWQ layout
            vendor_quant_algo="W4A16",
            modelopt_config="INT4_BLOCKWISE_WEIGHT_ONLY_CFG",
            group_size=128,
            weight_bits=4,
            calibration=False,
        ),
    )
}

# Spellings accepted for option.quantize / --quantize, mapped to a METHODS name.
ALIASES: dict[str, str] = {
    "int4_awq": "awq",
    "w4a16_awq": "awq",
    "w8a8": "smoothquant",
    "w8a16": "int8_wo",
    "w4a16": "int4_wo",
    "int8_weight_only": "int8_wo",
    "int4_weight_only": "int4_wo",
    "w4a16_gptq": "gptq",
}
# Method names that ask for no quantization (an explicit ``method`` argument; option.quantize
# itself is one of the option table's choices or unset).
NO_QUANTIZATION = frozenset({"", "none"})
# option.kv_cache_dtype (one of the option table's choices) -> the KV-cache quant_algo.
KV_CACHE_ALGOS: dict[str, str | None] = {"auto": None, "fp16": None, "bf16": None, "fp8": "FP8", "int8": "INT8"}
DEFAULT_SMOOTHQUANT_ALPHA = 0.8
DEFAULT_CALIB_MAX_SEQ_LEN = 512
DEFAULT_CALIB_SEED = 1234

_SMOOTHQUANT_ONLY = ("smoothquant_alpha", "smoothquant_per_token", "smoothquant_per_channel",
                     "multi_query_mode")


def canonical_method(name: str | None) -> str | None:
    """The METHODS name for a user spelling; None for "no quantization"; the input itself if unknown."""
    if name is None:
        return None
    key = name.strip().lower()
    if key in NO_QUANTIZATION:
        return None
    return ALIASES.get(key, key)


# The container's own spelling of a method lmi-build builds: static_int8 is int8 (DJL tnx_properties.py
# TnXQuantizeMethods, 0.28.0-dlc..0.30.0-dlc:45); plan_quantization plans it as int8.
CONTAINER_SPELLINGS: dict[str, str] = {"static_int8": "int8"}


def flag_methods(target: str) -> tuple[str, ...]:
    """The values ``--quantize`` takes for ``target``, in the option table's order: the methods some
    recipe builds there (``recipes/*.toml`` ``[targets.<target>] quantize``) and their container
    spellings. The option table's other choices (bitsandbytes, squeezellm, ...) are the container's
    runtime quantizations, which no build of lmi-build makes."""
    built = {method for recipe in load_recipes() if target in recipe.targets
             for method in recipe.targets[target].quantize}
    spec = exact_spec("option.quantize")
    choices = spec.choices if spec is not None else ()
    return tuple(choice for choice in choices if CONTAINER_SPELLINGS.get(choice, choice) in built)


def vendor_smoothquant_algo(per_channel: bool, per_token: bool) -> str:
    """convert_checkpoint.py's SmoothQuant quant_algo for its --per_channel/--per_token flags."""
    weights = "PER_CHANNEL" if per_channel else "PER_TENSOR"
    activations = "_PER_TOKEN" if per_token else ("_PER_TENSOR" if per_channel else "")
    return f"W8A8_SQ_{weights}{activations}_PLUGIN"


def tp_group_problem(quantization: QuantizationPlan, spec: ModelSpec, tp: int) -> PlanMessage | None:
    """Row-parallel layers (attention dense, MLP down) split their INPUT dimension over tp ranks, so
    each rank's share must still be whole groups; for the planner, once tp is known."""
    group = quantization.group_size
    if not group or tp <= 1 or quantization.method is None:
        return None
    dims = {"num_attention_heads*head_dim": spec.num_attention_heads * spec.head_dim}
    if spec.intermediate_size:
        dims["intermediate_size"] = spec.intermediate_size
    bad = [f"{name}/tp={value / tp:g}" for name, value in dims.items() if value % (group * tp)]
    if not bad:
        return None
    return PlanMessage(
        code="group_size_tp",
        message=f"{quantization.method} with tp={tp}: {', '.join(bad)} per rank is not a multiple of the "
                f"group size {group}",
        hint="lower the tensor parallel degree, or use smoothquant, fp8 or int8_wo",
    )


def _none(pre: PreQuantization) -> None:
    return None


@dataclass(frozen=True)
class QuantizationRules:
    """What a target decides about quantization: its package supplies them (``PlanningTarget.quantization``)."""

    target: str  # its name, for messages
    # A target that quantizes at load time takes only these methods (canonical name -> the planned one),
    # and refuses any other with ``load_time_hint``; None: it builds METHODS' quantizations.
    load_time_methods: Mapping[str, str] | None = None
    load_time_hint: str = ""
    # Why an already-quantized input cannot be used as it is (None: it can).
    prequantized_problem: Callable[[PreQuantization], PlanMessage | None] = _none
    # The quant_algo the artifact of an already-quantized input has (None: none recorded).
    prequantized_algo: Callable[[PreQuantization], str | None] = _none
    # METHODS it never builds, each with the one-line error that says why and what to do instead.
    refused_methods: Mapping[str, PlanMessage] = field(default_factory=dict)


def plan_quantization(method: str | None, options: ResolvedOptions, spec: ModelSpec, rules: QuantizationRules,
                      calib_file: Path | None, *,
                      checkpoint_route: Route = "modelopt") -> tuple[QuantizationPlan, list[PlanMessage]]:
    """Resolve the quantization step. ``method`` (a METHODS name or alias) wins over option.quantize.

    Returns the plan and its messages; messages whose code is in ``WARNING_CODES`` are warnings,
    every other one is an error (use ``split_messages``). Already includes the target's
    ``prequantized_problem``; recipe support checks stay with the planner.
    """
    messages: list[PlanMessage] = []
    given = read_options(options, CommonOptions)
    requested = method if method is not None else given.quantize
    name = canonical_method(requested)
    if spec.pre_quantization is not None:
        return _plan_prequantized(spec.pre_quantization, rules, name, messages)
    if name is None:
        if _kv_cache_algo(given) is not None:
            messages.append(PlanMessage(code="kv_cache_needs_quantize", message=f"option.kv_cache_dtype="
                                        f"{given.kv_cache_dtype} needs a calibrated quantization",
                                        hint="also set option.quantize (fp8, smoothquant, awq, gptq), or drop "
                                             "option.kv_cache_dtype"))
        _warn_ignored(options, None, messages)
        return QuantizationPlan(), messages
    if rules.load_time_methods is not None:
        return _plan_load_time(name, requested, rules, messages), messages
    entry = _built_method(name, requested, rules, messages)
    if entry is None:
        return QuantizationPlan(), messages
    quant_algo = _quant_algo(entry, given, options, checkpoint_route, messages)
    _warn_ignored(options, entry.name, messages)
    _check_model_fits(entry, spec, messages)
    kv = _kv_cache_algo(given)
    smoothquant = entry.name == "smoothquant"
    calibration = _plan_calibration(entry, options, given, calib_file, messages) \
        if entry.calibration or kv is not None else None
    return QuantizationPlan(
        method=entry.name, quant_algo=quant_algo, kv_cache_quant_algo=kv, group_size=entry.group_size,
        smoothquant_alpha=_or(given.smoothquant_alpha, DEFAULT_SMOOTHQUANT_ALPHA) if smoothquant else None,
        per_token=bool(given.smoothquant_per_token) if smoothquant else None,
        per_channel=bool(given.smoothquant_per_channel) if smoothquant else None,
        multi_query_mode=bool(given.multi_query_mode) if smoothquant else None, calibration=calibration,
    ), messages


def _plan_load_time(name: str, requested: str | None, rules: QuantizationRules,
                    messages: list[PlanMessage]) -> QuantizationPlan:
    """A target that quantizes at load time plans only its ``load_time_methods``."""
    methods = rules.load_time_methods or {}
    if name in methods:
        return QuantizationPlan(method=methods[name])
    messages.append(PlanMessage(code="quantize_target", message=f"--quantize {requested} is not available for "
                                f"{rules.target} (it quantizes at load time)", hint=rules.load_time_hint))
    return QuantizationPlan()


def _built_method(name: str, requested: str | None, rules: QuantizationRules,
                  messages: list[PlanMessage]) -> QuantMethod | None:
    """The METHODS entry of ``name`` where the target builds it; None, with the message that says why not."""
    entry = METHODS.get(name)
    if entry is None:
        messages.append(PlanMessage(code="quantize_unknown", message=f"unknown quantization method '{requested}'",
                                    hint=f"use one of: {', '.join(METHODS)}"))
        return None
    if entry.name in rules.refused_methods:
        messages.append(rules.refused_methods[entry.name])
        return None
    return entry


def _quant_algo(entry: QuantMethod, given: CommonOptions, options: ResolvedOptions, route: Route,
                messages: list[PlanMessage]) -> str | None:
    """The quant_algo the checkpoint of ``entry`` carries on ``route``; None: the vendor route cannot build it."""
    if entry.name == "smoothquant":
        per_token, per_channel = bool(given.smoothquant_per_token), bool(given.smoothquant_per_channel)
        if route == "vendor":
            return vendor_smoothquant_algo(per_channel, per_token)
        if per_token or (_given(options, "smoothquant_per_channel") and not per_channel):
            messages.append(PlanMessage(
                code="smoothquant_granularity",
                message=("ModelOpt SmoothQuant always uses per-channel weight and per-tensor activation "
                         "scales (W8A8_SQ_PER_CHANNEL); smoothquant_per_token/per_channel do not change it "
                         "(the trtllm target writes what the engine has)"),
                hint="drop the option, or use the vendor convert_checkpoint route for the *_PLUGIN variants",
            ))
        return entry.quant_algo
    if route != "vendor":
        return entry.quant_algo
    if entry.vendor_quant_algo is None:
        messages.append(PlanMessage(code="quantize_route_unsupported", message=f"--quantize {entry.name} needs "
                                    "ModelOpt, but this architecture only converts with TensorRT-LLM's "
                                    "convert_checkpoint.py", hint="use smoothquant, int8_wo or int4_wo for this architecture"))
    return entry.vendor_quant_algo


# Codes plan_quantization emits as warnings; every other code is an error.
WARNING_CODES = frozenset({"quantize_option_ignored", "smoothquant_granularity", "calib_size_capped",
                           "gptq_cpu_slow"})
GPTQ_CPU_PARAMS = 1_000_000_000


def split_messages(messages: list[PlanMessage]) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """(errors, warnings)."""
    errors = [m for m in messages if m.code not in WARNING_CODES]
    warnings = [m for m in messages if m.code in WARNING_CODES]
    return errors, warnings


def _plan_prequantized(
    pre: PreQuantization, rules: QuantizationRules, name: str | None, messages: list[PlanMessage]
) -> tuple[QuantizationPlan, list[PlanMessage]]:
    if name is not None:
        messages.append(PlanMessage(
            code="already_quantized",
            message=f"the model is already quantized ({pre.method}); lmi-build never re-quantizes",
            hint="drop --quantize / option.quantize to use its quantization, or start from the unquantized model",
        ))
    problem = rules.prequantized_problem(pre)
    if problem is not None:
        messages.append(problem)
    plan = QuantizationPlan(
        quant_algo=rules.prequantized_algo(pre),
        group_size=pre.group_size,
        pre_quantized=pre,
    )
    return plan, messages


def _plan_calibration(entry: QuantMethod, options: ResolvedOptions, given: CommonOptions, calib_file: Path | None,
                      messages: list[PlanMessage]) -> CalibrationPlan | None:
    """The calibration samples and settings, from the options (LMI's awq_calib_size first for AWQ)."""
    default_size = entry.default_calib_size or 64
    # awq_calib_size (LMI's key) wins over lmi-build's general calib_size for AWQ.
    # A table default of awq_calib_size must not hide an explicit calib_size.
    awq_size = entry.name == "awq" and "awq_calib_size" in options and (_given(options, "awq_calib_size")
                                                                        or not _given(options, "calib_size"))
    # The option table bounds each of these (sizes >= 1, calib_max_seq_len >= 8, calib_seed >= 0).
    size = _or(given.awq_calib_size if awq_size else given.calib_size, default_size)
    max_seq_len = _or(given.calib_max_seq_len, DEFAULT_CALIB_MAX_SEQ_LEN)
    batch_size = _or(given.calib_batch_size, entry.default_calib_batch_size)
    seed = _or(given.calib_seed, DEFAULT_CALIB_SEED)
    try:
        text = calibration_text.load(calib_file)
    except LmiBuildError as exc:
        messages.append(PlanMessage(code="calib_data", message=exc.message, hint=exc.hint))
        return None
    if size > len(text.samples):
        messages.append(PlanMessage(
            code="calib_size_capped",
            message=f"calibration asks for {size} samples but {text.dataset} has {len(text.samples)}; "
                    f"using {len(text.samples)}",
            hint="pass a larger --calib-data file or lower option.calib_size",
        ))
        size = len(text.samples)
    return CalibrationPlan(dataset=text.dataset, dataset_digest=text.digest, size=size,
                           max_seq_len=max_seq_len, batch_size=batch_size, seed=seed)


def _check_model_fits(entry: QuantMethod, spec: ModelSpec, messages: list[PlanMessage]) -> None:
    """GPTQ's time on a CPU host for a large model; a group-quantized method needs every linear
    layer's input dimension to split into whole groups."""
    if entry.name == "gptq" and spec.num_parameters > GPTQ_CPU_PARAMS:
        # Measured: GPTQ on a 0.5 B-parameter Llama did not finish in 22 min on 2 CPU cores
        # (ModelOpt's fused GPTQ kernel needs a GPU); AWQ took 82-202 s on the same model.
        messages.append(PlanMessage(
            code="gptq_cpu_slow",
            message=f"GPTQ calibrates layer by layer without a GPU kernel here: expect hours for "
                    f"{spec.num_parameters / 1e9:.1f} B parameters on a CPU host",
            hint="use awq (same W4A16 format), or run the build on a GPU host",
        ))
    group = entry.group_size
    if not group:
        return
    dims = {"hidden_size": spec.hidden_size, "num_attention_heads*head_dim": spec.num_attention_heads * spec.head_dim}
    if spec.intermediate_size:
        dims["intermediate_size"] = spec.intermediate_size
    bad = [f"{name}={value}" for name, value in dims.items() if value % group]
    if bad:
        messages.append(PlanMessage(
            code="group_size_shape",
            message=f"{entry.name} quantizes in groups of {group} input channels, but {', '.join(bad)} "
                    f"is not a multiple of {group}",
            hint="use smoothquant, fp8 or int8_wo for this model",
        ))


def _kv_cache_algo(given: CommonOptions) -> str | None:
    return KV_CACHE_ALGOS[given.kv_cache_dtype] if given.kv_cache_dtype is not None else None


def _warn_ignored(options: ResolvedOptions, method: str | None, messages: list[PlanMessage]) -> None:
    ignored = [] if method == "smoothquant" else [k for k in _SMOOTHQUANT_ONLY if _given(options, k)]
    if method != "awq":
        ignored += [k for k in ("awq_format", "awq_calib_size") if _given(options, k)]
    if ignored:
        keys = ", ".join(f"option.{k}" for k in ignored)
        messages.append(PlanMessage(
            code="quantize_option_ignored",
            message=f"{keys} only apply to another quantization method and are ignored",
            hint=f"remove them, or set option.quantize to match (now: {method or 'none'})",
        ))


def _given(options: ResolvedOptions, key: str) -> bool:
    """Set by the user (CLI, properties, env), not filled in from a table or recipe default."""
    return key in options and options.source_of(key) not in (Source.DEFAULT, Source.RECIPE, Source.DERIVED)


def _or(value: _N | None, default: _N) -> _N:
    """``value``, or ``default`` when the option is unset (or its text did not parse: reported)."""
    return default if value is None else value
