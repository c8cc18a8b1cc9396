"""Memory estimates: weights after quantization, KV cache, per-device share, host RAM for the
conversion steps, and the fit check against an instance type. Pure arithmetic on the ModelSpec.

Rules (documented in docs/notes/planning.md):
- weights: 16-bit = 2 B/param, fp32 = 4, int8 / fp8 / SmoothQuant W8A8 = 1, int4 = 0.5 plus one
  fp16 scale (and, for AWQ/GPTQ-style zero points, half a byte) per group; the embedding table and
  lm_head stay 16-bit when the rest is quantized. A model whose config ties lm_head to the embedding
  counts it once, unless the target writes it as a tensor of its own (``Workload.tied_head_written``:
  a TensorRT-LLM checkpoint without ``share_embedding_table``, ``quantize/tensor_map.lm_head_written``).
- KV cache per token = 2 (K and V) x layers x kv_heads x head_dim x KV dtype bytes.
- per device, a runtime that preallocates its KV cache (Neuron): weights / (tp*pp) + the KV cache a
  device holds for max_batch_size x max_seq_len (at least one KV head per device: when kv_heads < tp
  the heads are replicated) + the runtime's fixed overhead.
- per device, a paged KV cache (TensorRT-LLM: ``Workload.paged``): what must fit to load is weights /
  (tp*pp) + the engine's activations + the runtime's fixed overhead; the runtime then gives the KV cache
  a fraction of the memory left (``kv_cache_free_gpu_mem_fraction``, the release's default or the
  option set), so the estimate says how many tokens of KV cache that is and how many sequences of the
  planned max_seq_len fit at once. max_batch_size x max_seq_len is a cap there, not an allocation.
- activations (an estimate: TensorRT sizes them at build time, ``trt.ICudaEngine.device_memory_size``;
  TensorRT-LLM docs/source/reference/memory.md "Activation size": about max tokens of one forward pass
  x a constant per token): max_num_tokens (else max_batch_size x max_input_len, the packed input's
  bound) x (3 x hidden + 2 x the MLP's width per device) x the activation dtype's bytes, plus the
  float32 logits of the last token of max_batch_size sequences (vocab x 4 B each).
- vLLM / LMI-Dist (``Workload.engine_kv``): the engine takes ``gpu_memory_utilization`` of the device's
  memory, profiles one forward pass of max_num_batched_tokens tokens (the activation estimate above, with
  the sampler's float32 logits of max_num_seqs sequences) and gives the KV cache what is left after the
  weights, that peak and the runtime (vLLM's non-torch memory); the cache is allocated in blocks of
  block_size tokens, and the engine refuses to start unless one sequence of max_model_len fits:
  cdiv(max_model_len, block_size) blocks (V1 check_enough_kv_cache_memory, V0 raise_if_cache_size_invalid).
  The largest max_model_len that fits is the KV cache's whole blocks x block_size (what V1's binary search
  ``estimate_max_model_len`` finds; V0 names it as the tokens the KV cache can store).
  LMI-Dist 8 (LMI 0.26, not built on vLLM: ``EngineKvBudget.checks_sequence`` false) sizes its KV cache in its
  warmup, a prefill of max_rolling_batch_prefill_tokens, and checks no sequence length: it fails to start only
  when that pass and the warmup batch's own KV cache do not fit; a KV cache shorter than one sequence of the
  model's positions is a warning (such a request cannot be served).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lmi_build.model.spec import ModelSpec
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import GIB, InstanceType
from lmi_build.planning.plan import MemoryEstimate, QuantizationPlan

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "f32": 4.0, "f16": 2.0, "bf16": 2.0}

# Bytes per quantized weight for each method/quant_algo family (before group overhead).
_INT4 = ("awq", "gptq", "int4_wo", "w4a16", "w4a16_awq", "w4a16_gptq", "w4a8_awq", "int4")
_EIGHT_BIT = ("smoothquant", "int8_wo", "int8", "fp8", "w8a16", "w8a16_gptq", "w8a8", "static_int8",
              "fp8_per_channel_per_token", "bitsandbytes8", "compressed-tensors")
_KV_8BIT = ("FP8", "INT8")
# Calibration activations, tokenizer and the Python process itself, on top of the model copies.
HOST_OVERHEAD_BYTES = 2 * GIB


@dataclass(frozen=True)
class PagedKvCache:
    """A runtime that pages its KV cache from what is left on a device once the weights and the
    engine's activations are in: ``free_fraction`` of that memory (TensorRT-LLM's
    ``kv_cache_free_gpu_mem_fraction`` / ``KvCacheConfig.free_gpu_memory_fraction``)."""

    free_fraction: float
    fraction_source: str  # the release's default (cited in its profile) or the option the user set
    tokens_per_block: int  # the cache is allocated in blocks of this many tokens
    max_num_tokens: int  # tokens of one forward pass: what the engine's activation memory is sized for


@dataclass(frozen=True)
class EngineKvBudget:
    """vLLM's (and LMI-Dist's) start-up sizing of its KV cache (the module docstring's rule), each value the
    profile's release default (cited in its ``[vllm_memory]`` table) or the option the user set."""

    gpu_memory_utilization: float
    utilization_source: str  # the release default's citation, or the option set
    block_size: int
    max_num_batched_tokens: int  # tokens of the profiled forward pass
    max_model_len: int
    max_model_len_source: str  # the model's config (as vLLM derives it) or option.max_model_len
    check: str  # where the engine refuses a KV cache too small for one sequence (path:line)
    # tokens of the largest CUDA graph, where the release subtracts CUDA graph memory before sizing the KV
    # cache (0: it does not, or option.enforce_eager): estimated as that many tokens' activations
    cudagraph_tokens: int = 0
    # False: the engine refuses no max_model_len at start-up, only a warmup prefill of max_num_batched_tokens
    # whose own KV cache does not fit (LMI-Dist 8's warmup, a profile's check "warmup")
    checks_sequence: bool = True


@dataclass(frozen=True)
class Workload:
    """The shape the runtime reserves KV cache for."""

    batch_size: int
    seq_len: int
    tp: int
    pp: int = 1
    preallocated: bool = False  # Neuron: the whole KV cache is allocated at load time
    paged: PagedKvCache | None = None  # TensorRT-LLM: a fraction of what is free after loading
    # The target's checkpoint (and engine) holds a tied LM head as a tensor of its own: the weights count
    # the vocabulary x hidden table twice although config.json ties them.
    tied_head_written: bool = False
    engine_kv: EngineKvBudget | None = None  # vLLM / LMI-Dist: a share of the whole device, checked at start-up


def weight_bits(quant: QuantizationPlan, spec: ModelSpec) -> float | None:
    """Bits per quantized weight, or None when the weights stay in the model dtype."""
    if quant.pre_quantized is not None:
        pre = quant.pre_quantized
        if pre.bits:
            return float(pre.bits)
        name = (pre.quant_algo or pre.method).lower()
        return 4.0 if any(tag in name for tag in ("int4", "w4", "nvfp4")) else 8.0
    label = (quant.quant_algo or quant.method or "").lower()
    if not label:
        return None
    if label in _INT4 or label.startswith(("w4", "int4")):
        return 4.0
    if label in _EIGHT_BIT or label.startswith(("w8", "fp8", "int8")):
        return 8.0
    return None


def embedding_params(spec: ModelSpec, *, tied_head_written: bool = False) -> int:
    """The parameters of the embedding table and the LM head as the target stores them."""
    tables = 1 if spec.tie_word_embeddings and not tied_head_written else 2
    return tables * spec.vocab_size * spec.hidden_size


def stored_parameters(spec: ModelSpec, *, tied_head_written: bool = False) -> int:
    """The model's parameters as the target stores them: a tied LM head written apart counts again."""
    extra = spec.vocab_size * spec.hidden_size if spec.tie_word_embeddings and tied_head_written else 0
    return spec.num_parameters + extra


def weight_bytes(spec: ModelSpec, dtype: str, quant: QuantizationPlan, *, tied_head_written: bool = False) -> int:
    base = DTYPE_BYTES.get(dtype, 2.0)
    bits = weight_bits(quant, spec)
    parameters = stored_parameters(spec, tied_head_written=tied_head_written)
    if bits is None:
        return int(parameters * base)
    embeddings = min(embedding_params(spec, tied_head_written=tied_head_written), parameters)
    body = parameters - embeddings
    per_weight = bits / 8
    group = quant.group_size or (quant.pre_quantized.group_size if quant.pre_quantized else None)
    if bits <= 4:
        group = group if group and group > 0 else 128
        zero_point = 0.5 if _has_zero_point(quant) else 0.0
        per_weight += (2.0 + zero_point) / group
    # 16-bit embeddings/lm_head even when the model dtype is fp32: quantized exports write fp16.
    return int(body * per_weight + embeddings * min(base, 2.0))


def _has_zero_point(quant: QuantizationPlan) -> bool:
    if quant.pre_quantized is not None and quant.pre_quantized.zero_point is not None:
        return quant.pre_quantized.zero_point
    label = (quant.quant_algo or quant.method or "").lower()
    return "awq" in label or "gptq" in label


def kv_bytes_per_token(spec: ModelSpec, dtype: str, quant: QuantizationPlan, kv_heads: int | None = None) -> int:
    element = 1.0 if quant.kv_cache_quant_algo in _KV_8BIT else DTYPE_BYTES.get(dtype, 2.0)
    heads = spec.num_kv_heads if kv_heads is None else kv_heads
    layers = spec.num_layers + (spec.num_decoder_layers or 0)
    return int(2 * layers * heads * spec.head_dim * element)


def activation_bytes(spec: ModelSpec, dtype: str, workload: Workload) -> int:
    """The engine's activation memory on one device (the module docstring's estimate); 0 without a
    paged workload (the other runtimes' activations are in the accelerator's fixed overhead)."""
    tokens = workload.paged.max_num_tokens if workload.paged else None
    if workload.engine_kv is not None:
        tokens = workload.engine_kv.max_num_batched_tokens
    if tokens is None:
        return 0
    logits = workload.batch_size * spec.vocab_size * 4
    return int(tokens * activation_bytes_per_token(spec, dtype, workload.tp) + logits)


def activation_bytes_per_token(spec: ModelSpec, dtype: str, tp: int) -> float:
    """One token's activations on one device: (3 x hidden + 2 x the MLP's width per device) x dtype bytes."""
    mlp = (spec.intermediate_size or 4 * spec.hidden_size) * max(1, spec.experts_per_token or 1)
    return (3 * spec.hidden_size + 2 * mlp / max(1, tp)) * DTYPE_BYTES.get(dtype, 2.0)


def host_ram_bytes(spec: ModelSpec, dtype: str, quantized_bytes: int, quantizing: bool) -> int:
    """Peak host RAM of the convert/quantize steps: the model loaded in its build dtype, the
    exported copy, plus a fixed allowance. Quantization calibrates the full-precision model."""
    loaded = int(spec.num_parameters * DTYPE_BYTES.get(dtype, 2.0))
    exported = quantized_bytes if quantizing else loaded
    return loaded + exported + HOST_OVERHEAD_BYTES


def estimate(
    spec: ModelSpec,
    dtype: str,
    quant: QuantizationPlan,
    workload: Workload,
    instance: InstanceType | None,
) -> MemoryEstimate:
    devices = max(1, workload.tp * workload.pp)
    weights = weight_bytes(spec, dtype, quant, tied_head_written=workload.tied_head_written)
    per_token = kv_bytes_per_token(spec, dtype, quant)
    kv_total = per_token * workload.batch_size * workload.seq_len
    # A device holds its share of KV heads (at least one: heads are replicated when kv_heads < tp)
    # for its share of the layers.
    heads_per_device = max(1, -(-spec.num_kv_heads // max(1, workload.tp)))
    device_kv_per_token = kv_bytes_per_token(spec, dtype, quant, heads_per_device) / max(1, workload.pp)
    overhead = instance.overhead_bytes_per_device if instance else 0
    activations = activation_bytes(spec, dtype, workload)
    loaded = -(-weights // devices) + activations + overhead
    paged = workload.paged
    quantizing = quant.method is not None and quant.pre_quantized is None
    common = {
        "num_parameters": spec.num_parameters, "weight_bytes": weights, "kv_bytes_per_token": per_token,
        "kv_cache_bytes": kv_total, "devices": devices,
        "device_memory_bytes": instance.usable_bytes_per_device if instance else None,
        "instance_type": instance.name if instance else None,
        "host_ram_bytes": host_ram_bytes(spec, dtype, weights, quantizing),
    }
    if workload.engine_kv is not None:
        graphs = int(activation_bytes_per_token(spec, dtype, workload.tp) * workload.engine_kv.cudagraph_tokens)
        return _engine_kv_estimate(common, workload, workload.engine_kv, instance, loaded + graphs,
                                   activations, device_kv_per_token, graphs)
    if paged is None:
        per_device = loaded + int(device_kv_per_token * workload.batch_size * workload.seq_len)
        return MemoryEstimate(**common, per_device_bytes=per_device,
                              fits=(per_device <= instance.usable_bytes_per_device) if instance else None)
    kv_memory: int | None = None
    tokens: int | None = None
    if instance is not None:
        free = instance.usable_bytes_per_device - loaded
        kv_memory = max(0, int(free * paged.free_fraction))
        block = max(1, paged.tokens_per_block)
        tokens = int(kv_memory // max(1.0, device_kv_per_token * block)) * block
    return MemoryEstimate(
        **common, per_device_bytes=loaded,
        fits=(loaded <= instance.usable_bytes_per_device) if instance else None,
        activation_bytes=activations, kv_free_fraction=paged.free_fraction,
        kv_fraction_source=paged.fraction_source, device_kv_bytes_per_token=int(device_kv_per_token),
        kv_cache_device_bytes=kv_memory, kv_cache_tokens=tokens, max_seq_len=workload.seq_len,
        max_batch_size=workload.batch_size,
        full_length_sequences=None if tokens is None else tokens // max(1, workload.seq_len),
    )


def _engine_kv_estimate(common: Mapping[str, object], workload: Workload, budget: EngineKvBudget,
                        instance: InstanceType | None, loaded: int, activations: int,
                        device_kv_per_token: float, graphs: int) -> MemoryEstimate:
    """vLLM's KV cache on one device (the module docstring's rule): what the share it takes leaves after
    loading, in whole blocks, and whether one max_model_len sequence fits in it."""
    block = max(1, budget.block_size)
    block_bytes = max(1, int(device_kv_per_token * block))
    needed = -(-budget.max_model_len // block) * block_bytes
    # what must fit for the engine to start: one max_model_len sequence, or the warmup batch's own cache
    required = needed if budget.checks_sequence else -(-budget.max_num_batched_tokens // block) * block_bytes
    fields: dict[str, object] = {
        "activation_bytes": activations, "device_kv_bytes_per_token": int(device_kv_per_token),
        "max_seq_len": budget.max_model_len, "max_batch_size": workload.batch_size,
        "gpu_memory_utilization": budget.gpu_memory_utilization, "kv_fraction_source": budget.utilization_source,
        "kv_cache_needed_bytes": needed, "cudagraph_bytes": graphs if budget.cudagraph_tokens else None,
        "sequence_checked": budget.checks_sequence,
    }
    if instance is None:
        return MemoryEstimate.model_validate({**common, **fields, "per_device_bytes": loaded})
    requested = math.ceil(instance.usable_bytes_per_device * budget.gpu_memory_utilization)
    available = requested - loaded
    tokens = max(0, available) // block_bytes * block
    return MemoryEstimate.model_validate({
        **common, **fields, "per_device_bytes": loaded, "fits": available > 0 and required <= available,
        "kv_cache_device_bytes": max(0, available), "kv_cache_tokens": tokens,
        "full_length_sequences": tokens // max(1, budget.max_model_len),
        "max_model_len_fits": min(tokens, budget.max_model_len)})


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _more_devices(memory: MemoryEstimate, instance: InstanceType, unit: str) -> str:
    """The advice to shard further, only where it is feasible: with tp x pp already every device of the
    instance, a larger instance (more devices, or more memory on each) is the way."""
    if memory.devices < instance.devices:
        return f"raise --tp (up to {instance.devices} on {instance.name})"
    return (f"pick an instance with more {unit}s or more memory per {unit} (tp x pp = {memory.devices} is already "
            f"every {unit} of {instance.name})")


def check_fit(
    memory: MemoryEstimate,
    workload: Workload,
    instance: InstanceType,
    findings: Findings,
) -> MemoryEstimate:
    """Refuse a plan whose weights (and, where the runtime preallocates it, the whole KV cache)
    cannot fit on one device of ``instance``; return the estimate with ``fits`` settled.

    A paged KV cache (TensorRT-LLM, ``Workload.paged``) is sized by the runtime from what is left after
    loading: only weights, activations and the runtime must fit (``_check_paged_fit``). Otherwise a
    runtime that is not preallocated needs room for one full-length sequence: with less room than the
    whole batch needs it still runs, with fewer sequences in flight (a warning).
    """
    unit = "GPU" if instance.accelerator.kind == "gpu" else "NeuronCore"
    usable = instance.usable_bytes_per_device
    if memory.devices > instance.devices:
        findings.error(
            "instance_devices",
            f"the plan shards over {memory.devices} devices (tp x pp), {instance.name} has "
            f"{instance.devices} {unit}s",
            hint=f"lower --tp/--pp to at most {instance.devices} in total or pick a larger instance",
        )
    if workload.engine_kv is not None:
        return _check_engine_kv(memory, workload.engine_kv, instance, findings)
    if workload.paged is not None:
        return _check_paged_fit(memory, instance, findings, unit)
    if memory.fits:
        return memory
    device_kv = memory.per_device_bytes - (-(-memory.weight_bytes // memory.devices)) - instance.overhead_bytes_per_device
    per_sequence_kv = device_kv // max(1, workload.batch_size)
    minimum = memory.per_device_bytes - device_kv + per_sequence_kv
    if not workload.preallocated and minimum <= usable:
        room = usable - (minimum - per_sequence_kv)
        sequences = max(1, room // max(1, per_sequence_kv))
        findings.warn(
            "kv_cache_partial",
            f"weights and the KV cache for {workload.batch_size} x {workload.seq_len} tokens need "
            f"{gib(memory.per_device_bytes)} per {unit}, {instance.name} has {gib(usable)} usable: "
            f"about {sequences} full-length sequences fit at once",
            hint=f"lower --max-batch-size or the max lengths, or {_more_devices(memory, instance, unit)}",
        )
        return memory.model_copy(update={"fits": True})
    what = "weights, KV cache and runtime" if workload.preallocated else "weights, one sequence's KV cache and runtime"
    needed = memory.per_device_bytes if workload.preallocated else minimum
    findings.error(
        "memory_fit",
        f"needs {gib(needed)} per {unit} ({what}; {gib(memory.weight_bytes)} of weights over "
        f"{memory.devices} device(s)), {instance.name} has {gib(usable)} usable",
        hint="quantize (--quantize awq/fp8/...), lower the max lengths or batch size, or "
        + _more_devices(memory, instance, unit),
    )
    return memory


def _check_paged_fit(memory: MemoryEstimate, instance: InstanceType, findings: Findings, unit: str) -> MemoryEstimate:
    """Refuse only an engine that cannot load (weights + activations + runtime over the device's usable
    memory); warn when the KV cache left holds less than one sequence of the planned max_seq_len."""
    usable = instance.usable_bytes_per_device
    weights = -(-memory.weight_bytes // memory.devices)
    activations = memory.activation_bytes or 0
    if not memory.fits:
        findings.error(
            "memory_fit",
            f"the engine cannot load: {gib(weights)} of weights, {gib(activations)} of activations and "
            f"{gib(instance.overhead_bytes_per_device)} of runtime need {gib(memory.per_device_bytes)} per {unit} "
            f"({gib(memory.weight_bytes)} of weights over {memory.devices} device(s)), {instance.name} has "
            f"{gib(usable)} usable",
            hint="quantize (--quantize awq/fp8/...), lower option.max_num_tokens or the batch size, or "
            + _more_devices(memory, instance, unit),
        )
        return memory
    tokens, seq_len = memory.kv_cache_tokens or 0, memory.max_seq_len or 0
    if seq_len and tokens < seq_len:
        fraction = memory.kv_free_fraction or 0.0
        findings.warn(
            "kv_cache_short",
            f"the KV cache left on each {unit} holds {tokens:,} tokens ({fraction:.0%} of the "
            f"{gib(usable - memory.per_device_bytes)} free after loading), less than one sequence of "
            f"max_seq_len {seq_len:,}: no request can reach the planned length on {instance.name}",
            hint="lower --max-input-len/--max-output-len, quantize the KV cache, or "
            + _more_devices(memory, instance, unit),
        )
    return memory


def _check_engine_kv(memory: MemoryEstimate, budget: EngineKvBudget, instance: InstanceType,
                     findings: Findings) -> MemoryEstimate:
    """Refuse what vLLM refuses at start-up (``budget.check``): no memory left for the KV cache within
    gpu_memory_utilization, or too little for one sequence of max_model_len; the error names the largest
    max_model_len that fits and the options that change it."""
    if not budget.checks_sequence:
        return _check_warmup(memory, budget, instance, findings)
    if memory.fits:
        return memory
    util = budget.gpu_memory_utilization
    requested = math.ceil(instance.usable_bytes_per_device * util)
    weights = -(-memory.weight_bytes // memory.devices)
    graphs = f", {gib(memory.cudagraph_bytes)} of CUDA graphs" if memory.cudagraph_bytes else ""
    spent = (f"{gib(weights)} of weights, {gib(memory.activation_bytes or 0)} of profiled activations{graphs} and "
             f"{gib(instance.overhead_bytes_per_device)} of runtime")
    share = f"gpu_memory_utilization {util:g} of {instance.name}'s {gib(instance.usable_bytes_per_device)} per GPU ({budget.utilization_source})"
    fits = memory.max_model_len_fits or 0
    if fits <= 0:
        findings.error("engine_kv_cache", f"the engine refuses to start: {share} is {gib(requested)}, {spent} leave "
                       f"no room for one block of KV cache (\"No available memory for the cache blocks\"; {budget.check})",
                       hint="raise --tp, quantize (--quantize awq/fp8/...), raise option.gpu_memory_utilization, "
                            "or pick a larger instance")
        return memory
    findings.error(
        "engine_kv_cache",
        f"the engine refuses to start: one sequence of max_model_len {budget.max_model_len:,} "
        f"({budget.max_model_len_source}) needs {gib(memory.kv_cache_needed_bytes or 0)} of KV cache, and {share} "
        f"less {spent} leaves {gib(memory.kv_cache_device_bytes or 0)}; the largest max_model_len that fits is "
        f"{fits:,} ({budget.check})",
        hint=f"set option.max_model_len={fits} or less, raise option.gpu_memory_utilization, raise --tp, "
             "quantize (--quantize awq/fp8/...), or pick a larger instance")
    return memory


def _check_warmup(memory: MemoryEstimate, budget: EngineKvBudget, instance: InstanceType,
                  findings: Findings) -> MemoryEstimate:
    """LMI-Dist 8 (``budget.checks_sequence`` false): refuse a warmup prefill that leaves no room for its own
    KV cache (the engine fails to start); warn when the KV cache is shorter than one sequence of max_model_len,
    which it does not check (such a request cannot be served)."""
    weights = -(-memory.weight_bytes // memory.devices)
    spent = (f"{gib(weights)} of weights, {gib(memory.activation_bytes or 0)} of activations for its warmup prefill of "
             f"{budget.max_num_batched_tokens:,} tokens and {gib(instance.overhead_bytes_per_device)} of runtime")
    left = gib(memory.kv_cache_device_bytes or 0)
    if not memory.fits:
        findings.error("engine_kv_cache", f"the engine fails its start-up warmup: on {instance.name}'s "
                       f"{gib(instance.usable_bytes_per_device)} per GPU, {spent} leave {left}, less than the warmup "
                       f"batch's own KV cache ({budget.check})",
                       hint="lower option.max_rolling_batch_prefill_tokens, raise --tp, quantize (--quantize awq/fp8/...), "
                            "or pick a larger instance")
        return memory
    fits = memory.max_model_len_fits or 0
    if fits < budget.max_model_len:
        findings.warn("engine_kv_cache_short",
                      f"the engine starts (it checks no sequence length), but its KV cache of {memory.kv_cache_tokens or 0:,} "
                      f"tokens ({left} a GPU after {spent}) holds less than one sequence of {budget.max_model_len:,} "
                      f"({budget.max_model_len_source}): no request can reach that length on {instance.name} "
                      f"({budget.check})",
                      hint="raise --tp, quantize (--quantize awq/fp8/...), or pick a larger instance")
    return memory
