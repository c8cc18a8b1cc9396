"""The normalised model spec: one shape for every Hugging Face ``config.json``.

Read by ``lmi_build.model.normalize.read_spec`` (no torch, no transformers, no weights).
Every later stage (recipes, planner, memory estimate) reads only this, never the raw config.
"""

from typing import Any, Literal

from lmi_build.core.types import FrozenModel

PositionEmbedding = Literal["rope", "alibi", "learned", "relative", "none"]


class PreQuantization(FrozenModel):
    """A checkpoint that is already quantized (``quantization_config`` in config.json)."""

    method: str  # quant_method: "awq", "gptq", "fp8", "modelopt", "bitsandbytes", "compressed-tensors", ...
    bits: int | None = None
    group_size: int | None = None
    desc_act: bool | None = None  # GPTQ act-order; TensorRT-LLM cannot take desc_act=True
    zero_point: bool | None = None
    version: str | None = None  # AutoAWQ "gemm"/"gemv", ...
    quant_algo: str | None = None  # ModelOpt unified checkpoints
    raw: dict[str, Any] = {}


class RopeSpec(FrozenModel):
    theta: float = 10000.0
    scaling_type: str | None = None  # "linear", "dynamic", "llama3", "yarn", "longrope", ...
    scaling_factor: float | None = None
    original_max_position_embeddings: int | None = None
    rotary_dim: int | None = None  # GPT-J rotary_dim, or head_dim * partial_rotary_factor
    raw_scaling: dict[str, Any] | None = None


class ModelSpec(FrozenModel):
    model_type: str
    architectures: tuple[str, ...] = ()
    hidden_size: int
    num_layers: int  # decoder layers for decoder-only; encoder layers for enc-dec
    num_decoder_layers: int | None = None  # enc-dec only
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int | None = None
    vocab_size: int  # padded_vocab_size when the model declares one
    max_position_embeddings: int | None = None  # None: the architecture has no hard limit (ALiBi)
    max_position_source: str | None = None  # which config key gave max_position_embeddings
    position_embedding: PositionEmbedding = "rope"
    rope: RopeSpec | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    tie_word_embeddings: bool = False
    torch_dtype: str | None = None  # "float16", "bfloat16", "float32" as in the config
    is_encoder_decoder: bool = False
    auto_map: dict[str, Any] = {}
    requires_remote_code: bool = False  # auto_map present, or an architecture transformers lacks
    pre_quantization: PreQuantization | None = None
    num_parameters: int  # estimated from the shapes (weights of the checkpoint, incl. embeddings)
    raw: dict[str, Any] = {}  # the untouched config.json (for recipes' version inference)

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else self.model_type
