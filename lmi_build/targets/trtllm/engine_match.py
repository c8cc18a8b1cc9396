"""The engine is what serving.properties says: compare an engine's own config.json
(``build_config`` + ``pretrained_config``, or 0.7's ``builder_config``) with the plan or with an
artifact's serving.properties.

An engine built with other limits than the properties advertise fails at serve time (requests
longer than the engine's ``max_input_len``, a rolling batch larger than its ``max_batch_size``, a
block size or quantization the runtime does not expect). Each mismatch names both sides. A key the
engine config does not record (older releases, or fields this version lacks) is not compared.
"""

from collections.abc import Mapping

from lmi_build.core.types import FrozenModel
from lmi_build.planning.context import read_written
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.trtllm.engine_check import world_size_of
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.options import TrtllmOptions

# option.quantize -> how the engine's quant_algo starts (TensorRT-LLM QuantAlgo names, docs/VENDOR-FACTS.md §3).
QUANT_ALGO_PREFIX = {"smoothquant": "W8A8_SQ", "awq": "W4A16_AWQ", "gptq": "W4A16_GPTQ", "fp8": "FP8",
                     "int8_wo": "W8A16", "int4_wo": "W4A16"}
KV_CACHE_ALGO = {"fp8": "FP8", "int8": "INT8"}
# option.dtype -> the engine's pretrained_config.dtype (int8: whatever the engine has).
ENGINE_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


class EngineExpectation(FrozenModel):
    """What the engine must have; ``None``: not stated by the side being compared."""

    side: str  # "the plan" or "serving.properties", named in every mismatch
    max_batch_size_at_least: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_output_len: int | None = None
    tokens_per_block: int | None = None
    quant_algo_prefix: str | None = None  # "" means: not quantized
    kv_cache_quant_algo: str | None = None  # "" means: not quantized
    plugin_dtypes: dict[str, str] = {}
    world_size: int | None = None
    dtype: str | None = None  # the engine's pretrained_config.dtype ("float16", ...)


class EngineDifference(FrozenModel):
    """One way an engine differs from what a side says: the field compared and the message."""

    key: str  # "max_batch_size", "world size", "dtype", ... (the field of ``_engine_facts``)
    message: str  # names both sides


def expectation_from_plan(plan: BuildPlan) -> EngineExpectation:
    build = plan.knobs(TrtllmBuild)
    quant = plan.quantization
    return EngineExpectation(
        side="the plan", max_batch_size_at_least=build.max_batch_size, max_input_len=build.max_input_len,
        max_seq_len=build.max_seq_len, max_output_len=build.max_output_len, tokens_per_block=build.tokens_per_block,
        quant_algo_prefix=quant.quant_algo or "", kv_cache_quant_algo=quant.kv_cache_quant_algo or "",
        plugin_dtypes={k: v for k, v in (("gemm_plugin", build.gemm_plugin),
                                          ("gpt_attention_plugin", build.gpt_attention_plugin)) if v},
        world_size=build.world_size)


def expectation_from_properties(properties: Mapping[str, str]) -> EngineExpectation:
    given = read_written(properties, TrtllmOptions)
    # The flat layout's service reads pipeline_parallel_size (djl-serving 0.33.0-dlc trt_properties.py:42).
    pp = given.pipeline_parallel_degree or given.pipeline_parallel_size or 1
    tp = given.tensor_parallel_degree if isinstance(given.tensor_parallel_degree, int) else None  # "max": unstated
    return EngineExpectation(
        side="serving.properties", max_batch_size_at_least=given.max_rolling_batch_size,
        max_input_len=given.max_input_len, tokens_per_block=given.tokens_per_block,
        # Unset says nothing (a pre-quantized model's engine needs no option.quantize to serve).
        quant_algo_prefix=QUANT_ALGO_PREFIX.get(given.quantize) if given.quantize else None,
        # "auto", "fp16": not quantized
        kv_cache_quant_algo=KV_CACHE_ALGO.get(given.kv_cache_dtype, "") if given.kv_cache_dtype else None,
        world_size=tp * pp if tp is not None and tp > 0 else None,
        dtype=ENGINE_DTYPE.get(given.dtype or ""))


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _engine_facts(config: Mapping[str, object]) -> dict[str, object]:
    """The compared fields of an engine config, wherever its release keeps them."""
    build = config.get("build_config") or config.get("builder_config") or {}
    build = build if isinstance(build, dict) else {}
    plugins = build.get("plugin_config") or config.get("plugin_config") or {}
    plugins = plugins if isinstance(plugins, dict) else {}
    pretrained = config.get("pretrained_config")
    quantization = pretrained.get("quantization") if isinstance(pretrained, dict) else None
    facts: dict[str, object] = {key: _int(build.get(key)) for key in
                                ("max_batch_size", "max_input_len", "max_seq_len", "max_output_len")}
    facts["tokens_per_block"] = _int(plugins.get("tokens_per_block", build.get("tokens_per_block")))
    for plugin in ("gemm_plugin", "gpt_attention_plugin"):
        facts[plugin] = plugins.get(plugin)
    if isinstance(quantization, dict):
        facts["quant_algo"] = quantization.get("quant_algo") or ""
        facts["kv_cache_quant_algo"] = quantization.get("kv_cache_quant_algo") or ""
    facts["world_size"] = world_size_of(dict(config))
    dtype = pretrained.get("dtype") if isinstance(pretrained, dict) else None
    facts["dtype"] = dtype if isinstance(dtype, str) else None
    return facts


def engine_mismatches(config: Mapping[str, object], expected: EngineExpectation) -> list[str]:
    """Each way the engine differs from ``expected``, naming both sides; empty when it matches."""
    return [difference.message for difference in engine_differences(config, expected)]


def engine_differences(config: Mapping[str, object], expected: EngineExpectation) -> list[EngineDifference]:
    """``engine_mismatches`` with the field of each: what the container start-up model
    (``startup.py``) tells apart (a world size the runtime refuses, a batch it caps)."""
    found = _engine_facts(config)
    side = expected.side
    problems: list[EngineDifference] = []

    def add(key: str, message: str) -> None:
        problems.append(EngineDifference(key=key, message=message))

    def differs(key: str, wanted: object, have: object) -> None:
        if wanted is not None and have is not None and wanted != have:
            add(key, f"{key}: engine {have if have != '' else 'none'}, {side} {wanted if wanted != '' else 'none'}")

    batch = found["max_batch_size"]
    if expected.max_batch_size_at_least is not None and isinstance(batch, int) and batch < expected.max_batch_size_at_least:
        add("max_batch_size", f"max_batch_size: engine {batch} < {side} {expected.max_batch_size_at_least} "
                              "(max_rolling_batch_size)")
    differs("max_input_len", expected.max_input_len, found["max_input_len"])
    if found["max_seq_len"] is not None:
        differs("max_seq_len", expected.max_seq_len, found["max_seq_len"])
    else:
        differs("max_output_len", expected.max_output_len, found["max_output_len"])
    differs("tokens_per_block", expected.tokens_per_block, found["tokens_per_block"])
    for plugin, dtype in expected.plugin_dtypes.items():
        differs(plugin, dtype, found[plugin])
    algo = found.get("quant_algo")
    if expected.quant_algo_prefix is not None and isinstance(algo, str):
        wanted = expected.quant_algo_prefix
        if (wanted == "" and algo != "") or (wanted != "" and not algo.startswith(wanted)):
            add("quant_algo", f"quant_algo: engine {algo or 'none'}, {side} {wanted or 'none'}")
    differs("kv_cache_quant_algo", expected.kv_cache_quant_algo, found.get("kv_cache_quant_algo"))
    differs("world size", expected.world_size, found["world_size"])
    differs("dtype", expected.dtype, found["dtype"])
    return problems
