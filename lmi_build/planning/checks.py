"""Validations and knob resolutions shared by every target. Each problem is a PlanMessage with a
stable code, the numbers in the message and the fix in the hint."""

from __future__ import annotations

from lmi_build.model import aliases
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolve import option_spec
from lmi_build.options.resolved import Source, _full_key
from lmi_build.planning.context import PlanContext, read_options
from lmi_build.planning.findings import Findings
from lmi_build.planning.options import CommonOptions

# option.dtype (one of the option table's choices) -> the TensorRT-LLM / torch dtype name; the
# table's int8 is LMI-Dist's alone.
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# rope_scaling types whose max_position_embeddings is already the extended length.
_PRE_EXTENDED_ROPE = frozenset({"llama3", "yarn", "longrope", "su"})
_USER_SOURCES = (Source.CLI, Source.PROPERTIES, Source.ENV, Source.ALIAS)


def resolve_dtype(ctx: PlanContext) -> str:
    dtype = read_options(ctx, CommonOptions).dtype or "fp16"
    found = DTYPES.get(dtype)
    if found is None:
        ctx.findings.error("dtype", f"option.dtype={dtype} is not a dtype lmi-build can build",
                           hint=f"use --dtype {', '.join(DTYPES)}")
        return "float16"
    return found


# Why a dtype nobody set is fp16: the option table's default, LMI's own.
LMI_DTYPE_DEFAULT = ("LMI's default when option.dtype is unset (deepjavalibrary/djl-serving 0.33.0-dlc (8b3b685b) "
                     "serving/docs/lmi/deployment_guide/configurations.md:94 \"If not provided, LMI will use fp16\"; "
                     "0.26.0-dlc configurations_large_model_inference_containers.md:13 \"Default is fp16\")")


def check_dtype_cast(ctx: PlanContext, planned: str) -> None:
    """Warn when the build casts the model's weights to another dtype than its config.json's torch_dtype and
    the user did not ask for it, naming both and why (a bf16 model in fp16 can overflow: fp16 tops out at
    65504). A family's own dtype rule has already said so (``family_dtype_default``)."""
    model = ctx.spec.torch_dtype
    family_said = any(message.code == "family_dtype_default" for message in ctx.findings.warnings)
    if model is None or model not in DTYPES.values() or model == planned or family_said:
        return
    source = ctx.source_of_field(CommonOptions, "dtype")
    if source in _USER_SOURCES:
        return
    if source is Source.RECIPE:
        why = f"the {ctx.recipe.name} recipe's default"
    elif source is Source.DEFAULT or source is None:
        why = LMI_DTYPE_DEFAULT
    else:
        why = f"the {ctx.target} plan derives it"
    ctx.findings.warn("dtype_cast", f"the model's weights are {lmi_dtype(model)} (config.json torch_dtype {model}); "
                      f"the build casts them to {lmi_dtype(planned)}: {why}",
                      hint=f"pass --dtype {lmi_dtype(model)} to keep the model's dtype, or --dtype {lmi_dtype(planned)} "
                      "to choose this one and silence this")


def lmi_dtype(dtype: str) -> str:
    """The serving.properties spelling of a torch dtype name."""
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[dtype]


def resolve_tp(ctx: PlanContext, *, pp: int = 1, unit: str = "GPU") -> int:
    """option.tensor_parallel_degree as an int; ``max`` = the instance's devices / pp."""
    requested = read_options(ctx, CommonOptions).tensor_parallel_degree
    if requested == "max":
        if ctx.instance is None and ctx.user_options(CommonOptions).tensor_parallel_degree is None:
            # The container's own default is "max"; ahead of time the device count is unknown.
            ctx.findings.warn("tp_default",
                              "the container would use every device (tensor_parallel_degree=max); "
                              "planning tp=1 because no instance type was given",
                              hint="pass --tp <n> or --instance-type to build for more devices")
            ctx.write_options(CommonOptions(tensor_parallel_degree=1), "default max without --instance-type")
            return 1
        if ctx.instance is None:
            ctx.findings.error("tp_max_needs_instance",
                               "tensor_parallel_degree=max needs to know how many devices the target has",
                               hint="pass --tp <n>, or --instance-type (e.g. g5.12xlarge) to resolve 'max'")
            return 1
        tp = max(1, ctx.instance.devices // max(1, pp))
        ctx.write_options(CommonOptions(tensor_parallel_degree=tp),
                          f"max on {ctx.instance.name} ({ctx.instance.devices} {unit}s)")
        return tp
    if requested == -1:
        ctx.findings.error("tp_all_devices",
                           "tensor_parallel_degree=-1 (all devices, as HF Accelerate reads it) cannot be planned "
                           "ahead of time",
                           hint="pass --tp <n>, or --tp max with --instance-type")
        return 1
    return requested if isinstance(requested, int) else 1  # None: resolution reported the value


def check_tp_heads(ctx: PlanContext, tp: int) -> None:
    heads = ctx.spec.num_attention_heads
    if heads % tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0 and d <= 64]
        ctx.findings.error("tp_heads",
                           f"tp={tp} does not divide the {heads} attention heads",
                           hint=f"use a tp that divides {heads}: {', '.join(map(str, divisors))}")


def check_kv_heads_gpu(ctx: PlanContext, tp: int) -> None:
    """TensorRT-LLM / vLLM shard KV heads when tp divides them, replicate them when they divide tp."""
    kv = ctx.spec.num_kv_heads
    if kv == ctx.spec.num_attention_heads:
        return  # multi-head attention: check_tp_heads already covers it
    if tp % kv and kv % tp:
        ctx.findings.error("tp_kv_heads",
                           f"tp={tp} and the {kv} key/value heads do not divide each other",
                           hint=f"use a tp that divides {kv} or is a multiple of it")


def max_positions(ctx: PlanContext) -> int | None:
    """The longest sequence the model supports, allowing for rope scaling; None: no hard limit."""
    spec = ctx.spec
    # ALiBi and T5's relative buckets extrapolate: their configured length is not a hard limit.
    if spec.position_embedding in ("alibi", "relative") or spec.max_position_embeddings is None:
        return None
    base = spec.max_position_embeddings
    configured = (spec.rope.scaling_type or "").lower() if spec.rope else ""
    given = read_options(ctx, CommonOptions)
    scaling_type = given.rotary_scaling_type or configured
    factor = given.rotary_scaling_factor or (spec.rope.scaling_factor if spec.rope else None)
    if scaling_type and factor and factor > 1 and scaling_type not in _PRE_EXTENDED_ROPE:
        # Bounded: a factor the option table lets through (any float > 1) must not make a length no
        # container reads (model_config refuses a config's own factor past this).
        return int(min(base * factor, SIZE_LIMIT))
    return base


def check_total_length(ctx: PlanContext, total: int, what: str, hint: str) -> None:
    if any(error.code == "invalid_value" and "_len" in error.message.split("=", 1)[0]
           for error in ctx.findings.errors):
        return  # a length was refused: the total would be of the defaults that stand in for it
    limit = max_positions(ctx)
    if limit is not None and total > limit:
        source = ctx.spec.max_position_source or "max_position_embeddings"
        ctx.findings.error("max_len_positions",
                           f"{what} = {total} exceeds the model's {limit} positions ({source})",
                           hint=hint.format(limit=limit))


def check_common(ctx: PlanContext) -> None:
    """Checks that do not depend on the target's knobs."""
    spec = ctx.spec
    if spec.requires_remote_code and not read_options(ctx, CommonOptions).trust_remote_code:
        ctx.findings.error("remote_code",
                           f"{spec.architecture} needs the model's own Python code (auto_map), which is not trusted",
                           hint="review the repository's code, then pass --trust-remote-code")
    text = ctx.text_options(CommonOptions)
    has_type, has_factor = text.rotary_scaling_type is not None, text.rotary_scaling_factor is not None
    if has_type != has_factor:
        given, missing = ("rotary_scaling_type", "rotary_scaling_factor") if has_type else (
            "rotary_scaling_factor", "rotary_scaling_type")
        ctx.findings.error("rotary_scaling_pair", f"option.{given} is set without option.{missing}",
                           hint="set option.rotary_scaling_type and option.rotary_scaling_factor together")
    check_option_restrictions(ctx)


# config.json sizes that must be positive integers where present (top level and text_config).
SIZE_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "vocab_size",
             "intermediate_size", "max_position_embeddings", "head_dim", "n_head", "n_layer", "n_embd", "n_positions")
# The largest length or size a plan takes from a config: DJL reads every length option as a Java int
# (data/options.toml maximum), and max_seq_len = the model's positions; far above any real model (the
# largest public configs: hidden 25k, vocab 260k, 10M positions).
SIZE_LIMIT = 2**31 - 1
# The dtypes a checkpoint is read in (config.json torch_dtype, spelled as transformers does).
CHECKPOINT_DTYPES = tuple(dict.fromkeys(aliases.DTYPE_NAMES.values()))
_FIX = "fix or re-download the model's config.json"


def model_config_problems(spec: ModelSpec, findings: Findings) -> bool:
    """A config.json no model can have (0 KV heads, negative layers, 10**22 vocab or positions, an
    unknown torch_dtype) is a plan error, not a crash or a division by zero hours later; the planner
    stops there, before any target plans with it (issue 42 item 9). True when there are problems."""
    before = len(findings.errors)
    raw = spec.raw
    for where, table in (("", raw), ("text_config.", raw.get("text_config"))):
        if isinstance(table, dict):
            _check_sizes(table, where, findings)
    _check_spec_sizes(spec, findings)
    if spec.torch_dtype is not None and spec.torch_dtype not in CHECKPOINT_DTYPES:
        findings.error("model_config", f"config.json torch_dtype = {str(spec.torch_dtype)[:40]!r} is not a dtype "
                       f"a checkpoint is read in ({', '.join(CHECKPOINT_DTYPES)})", hint=_FIX)
    return len(findings.errors) > before


def _check_sizes(table: dict[str, object], where: str, findings: Findings) -> None:
    for key in SIZE_KEYS:
        value = table.get(key)
        if value is not None and not _possible_size(value):
            findings.error("model_config", f"config.json {where}{key} = {str(value)[:40]} is not a possible size "
                           f"(a positive integer, at most {SIZE_LIMIT})", hint=_FIX)
    heads, kv = table.get("num_attention_heads"), table.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads > 0 and kv > 0 and heads % kv:
        findings.error("model_config", f"config.json {where}num_attention_heads = {heads} is not a multiple "
                       f"of num_key_value_heads = {kv}", hint=_FIX)


def _check_spec_sizes(spec: ModelSpec, findings: Findings) -> None:
    """The sizes the build reads, whichever config key stated them (``n_ctx``, ``num_local_experts``, a
    rope_scaling's own fields), and the length RoPE scaling extends the positions to."""
    rope = spec.rope
    stated = {spec.max_position_source or "max_position_embeddings": spec.max_position_embeddings,
              _stated_key(spec, aliases.NUM_EXPERTS): spec.num_experts,
              _stated_key(spec, aliases.EXPERTS_PER_TOKEN): spec.experts_per_token,
              "rope_scaling.original_max_position_embeddings": rope.original_max_position_embeddings if rope else None}
    for key, value in stated.items():
        if key not in SIZE_KEYS and value is not None and not _possible_size(value):
            findings.error("model_config", f"config.json {key} = {str(value)[:40]} is not a possible size "
                           f"(a positive integer, at most {SIZE_LIMIT})", hint=_FIX)
    if rope is not None and rope.rotary_dim is not None and not 0 < rope.rotary_dim <= spec.head_dim:
        findings.error("model_config", f"config.json gives a rotary dimension of {str(rope.rotary_dim)[:40]} for a "
                       f"head dimension of {spec.head_dim} (rotary_dim or partial_rotary_factor)", hint=_FIX)
    kind = (rope.scaling_type or "").lower() if rope is not None else ""
    factor = rope.scaling_factor if rope is not None and kind else None
    positions = spec.max_position_embeddings
    if factor and positions and factor > 1 and kind not in _PRE_EXTENDED_ROPE and positions * factor > SIZE_LIMIT:
        findings.error("model_config", f"config.json rope_scaling factor {factor:.6g} x {positions} positions "
                       f"is more than {SIZE_LIMIT} positions", hint=_FIX)


def _stated_key(spec: ModelSpec, keys: tuple[str, ...]) -> str:
    """The config key that stated a fact (its first spelling when none did)."""
    return next((key for key in keys if key in spec.raw), keys[0])


def _possible_size(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 < value <= SIZE_LIMIT


def check_rope_scaling_type(ctx: PlanContext) -> None:
    """A rope_scaling type the build's transformers has no rotary embedding for is refused in the plan
    (the export would stop with a KeyError), naming the types it has (``aliases.ROPE_SCALING_TYPES``)."""
    rope = ctx.spec.rope
    kind = rope.scaling_type if rope is not None else None
    if kind is None or kind in aliases.ROPE_SCALING_TYPES or \
            kind in aliases.ROPE_SCALING_RENAMED.get(ctx.spec.model_type, ()):
        return
    ctx.findings.error("rope_scaling_type", f"config.json rope_scaling type {kind[:40]!r} is not one transformers "
                       f"builds a model with ({', '.join(aliases.ROPE_SCALING_TYPES)}), so the {ctx.target} "
                       "build cannot load the model", hint=f"{_FIX}, or use a model with a supported RoPE scaling")


def check_option_restrictions(ctx: PlanContext) -> None:
    allowed = {_full_key(key) for key in ctx.support.options_allowed}
    refused = {_full_key(key) for key in ctx.support.options_refused}
    for key, item in ctx.options.values.items():
        if item.source not in _USER_SOURCES:
            continue
        origin = f" (from {item.origin})" if item.origin else ""
        if key in refused:
            ctx.findings.error("option_refused",
                               f"{key} is not supported for {ctx.recipe.name} on {ctx.target}{origin}",
                               hint=f"remove {key}")
            continue
        spec = option_spec(key)
        if spec is not None and spec.restricted and key not in allowed:
            ctx.findings.error("option_not_allowed",
                               f"{key} only applies to some architectures, not {ctx.recipe.name} on {ctx.target}{origin}",
                               hint=f"remove {key}")
