"""The build plan: every knob resolved, validated, with a memory estimate and a cache key.

A plan is computed without heavy imports and without touching weights; steps only execute a plan.
``plan --json`` prints ``BuildPlan.model_dump(mode="json")`` (the output contract CI relies on).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lmi_build.model.spec import ModelSpec, PreQuantization
from lmi_build.types import ModelIdentity, PlanMessage, TargetName


class CalibrationPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    dataset: str  # "builtin:<name>" or "file:<basename>"
    dataset_digest: str  # sha256 of the calibration text, so a changed file changes the cache key
    size: int  # number of samples
    max_seq_len: int
    batch_size: int = 1
    seed: int = 1234


class QuantizationPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    method: str | None = None  # None: no quantization step (fp16/bf16 conversion only)
    quant_algo: str | None = None  # TensorRT-LLM / ModelOpt QuantAlgo string, e.g. "W4A16_AWQ"
    kv_cache_quant_algo: str | None = None  # "FP8" | "INT8" | None
    group_size: int | None = None
    smoothquant_alpha: float | None = None
    per_token: bool | None = None
    per_channel: bool | None = None
    multi_query_mode: bool | None = None
    calibration: CalibrationPlan | None = None
    pre_quantized: PreQuantization | None = None  # the input is already quantized: no re-quantization


class TrtllmBuild(BaseModel):
    model_config = ConfigDict(frozen=True)

    tp: int
    pp: int = 1
    dtype: Literal["float16", "bfloat16", "float32"]
    max_input_len: int
    max_output_len: int
    max_seq_len: int  # max_input_len + max_output_len
    max_batch_size: int
    max_num_tokens: int | None = None
    max_beam_width: int = 1
    tokens_per_block: int | None = None  # None: the toolchain's default
    gemm_plugin: str | None = None  # dtype string or None (disabled)
    gpt_attention_plugin: str | None = None
    use_paged_context_fmha: bool = False
    use_fused_mlp: bool | None = None
    multi_block_mode: bool | None = None
    use_custom_all_reduce: bool | None = None
    enable_kv_cache_reuse: bool = False
    rotary_base: float | None = None
    rotary_dim: int | None = None
    rotary_scaling_type: str | None = None
    rotary_scaling_factor: float | None = None
    model_version: dict[str, str] = {}  # {"baichuan_model_version": "v2_13b"}
    checkpoint_route: Literal["modelopt", "vendor"] = "modelopt"
    # modelopt route: "stream" writes ModelOpt's unquantized layout tensor by tensor (bounded memory,
    # quantize/trtllm_stream.py); "modelopt" loads the model into ModelOpt's exporter.
    checkpoint_writer: Literal["modelopt", "stream"] = "modelopt"
    modelopt_decoder: str | None = None
    trtllm_architecture: str | None = None
    trtllm_example: str | None = None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


class NeuronxBuild(BaseModel):
    model_config = ConfigDict(frozen=True)

    tp: int
    amp: Literal["f16", "bf16", "f32"]
    n_positions: tuple[int, ...]  # token-generation buckets
    context_length_estimate: tuple[int, ...]  # context-encoding buckets
    batch_size: int
    continuous_batching: bool = False
    gqa_requested: str | None = None
    gqa_effective: str | None = None  # after TNX's silent fallback rules
    unroll: int | None = None
    neuron_optimize_level: int | None = None
    on_device_embedding: bool = False
    compiler_flags: str  # byte-identical to what the serving container computes (NEFF cache key)
    platform: Literal["inf2", "trn1"] | None = None
    loader: Literal["tnx", "optimum", "nxdi", "vllm"] = "tnx"  # the model loader DJL picks
    # The artifact layout: the profile's precompiled layout, or "neuronx-cache" (a compile-cache
    # tree for option.compiled_graph_path=s3://..., served next to the original weights).
    layout: Literal["neuronx-tnx", "neuronx-legacy", "neuronx-split", "neuronx-optimum", "neuronx-cache"] = (
        "neuronx-tnx")
    # What the compile step passes, exactly as DJL's TNX loader would: from_pretrained kwargs and
    # the NeuronConfig keys (only those DJL sets).
    tnx_kwargs: dict[str, Any] = {}
    neuron_config: dict[str, Any] = {}
    # With the optimum loader: the NeuronModelForCausalLM.from_pretrained export kwargs DJL's
    # OptimumModelLoader passes (compiler args + input shapes).
    optimum_kwargs: dict[str, Any] = {}
    # The split layout (LMI 0.26/0.27) loads checkpoint/ with this transformers_neuronx sampling
    # class ("<module>.<class>"), chosen by model type.
    split_class: str | None = None


class HfBuild(BaseModel):
    model_config = ConfigDict(frozen=True)

    tp: int
    dtype: Literal["float16", "bfloat16", "float32"]
    # hf: plain; modelopt_hf: ModelOpt unified (hf_quant_config.json); gptq/awq: quant_method gptq/awq
    # packed for vLLM/LMI-Dist (lmi_build/targets/hf/data/serving_formats.toml)
    export_format: Literal["hf", "modelopt_hf", "gptq", "awq", "compressed_tensors"] = "hf"


class MemoryEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    num_parameters: int
    weight_bytes: int  # after quantization, whole model
    kv_bytes_per_token: int  # all layers, at the KV cache dtype
    kv_cache_bytes: int  # for max_batch_size x max_seq_len (or n_positions)
    devices: int  # tp * pp
    per_device_bytes: int  # weights/devices + kv/devices + fixed overhead
    device_memory_bytes: int | None = None  # from --instance-type
    instance_type: str | None = None
    fits: bool | None = None  # None when no instance type was given
    host_ram_bytes: int | None = None  # peak host RAM the convert/quantize steps need


class CheckpointStepEstimate(BaseModel):
    """Where the convert/quantize step is expected to run and what it costs, from the rates in
    ``lmi_build/data/quantize_rates.toml`` (measured; see its ``[source]``). Not part of the cache
    key: the build records the device it really used in the manifest's step entry."""

    model_config = ConfigDict(frozen=True)

    device: Literal["cpu", "cuda"]  # what this host offers at plan time
    gpus: int  # visible CUDA devices (0 on CPU)
    detected: str  # how the device was found, e.g. "/proc/driver/nvidia/gpus: 4"
    load_dtype: str  # the dtype the model is loaded (and calibrated) in
    method: str | None  # the quantization method; None: an unquantized conversion
    calibration_tokens: int = 0  # estimated from the planned samples (characters per token)
    seconds: float | None = None  # None: no measured rate for this device and method
    host_ram_bytes: int  # peak resident memory of the step's process
    gpu_bytes_per_device: int | None = None  # only with device cuda
    basis: list[str] = []  # one line per number: which measured rate or factor it comes from


class ToolchainRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    target: TargetName
    profile: str | None = None  # container profile name (trtllm) or SDK pin (neuronx)
    image: str | None = None
    versions: dict[str, str] = {}  # {"tensorrt_llm": "0.8.0", "tensorrt": "9.2.0", "cuda": "12.2"}


class BuildPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_version: int = 1
    target: TargetName
    recipe: str
    recipe_version: int
    model: ModelIdentity
    spec: ModelSpec
    options: dict[str, str]  # serving.properties keys/values the artifact will carry
    option_sources: dict[str, str]  # key -> Source value ("cli", "env", ...)
    build: TrtllmBuild | NeuronxBuild | HfBuild | None = None  # None only when invalid early
    quantization: QuantizationPlan = QuantizationPlan()
    memory: MemoryEstimate | None = None
    checkpoint_step: CheckpointStepEstimate | None = None  # None: no convert/quantize step on this host
    toolchain: ToolchainRef
    cache_key: str  # "sha256:<hex>" over every build-relevant field (see planning.cache_key)
    valid: bool
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["spec"].pop("raw", None)  # the raw config is large and in the artifact anyway
        return data
