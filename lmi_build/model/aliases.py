"""Where each fact lives in a Hugging Face ``config.json``: alias tables, one per fact.

Model authors spell the same shape differently (``hidden_size``, ``n_embd``, ``d_model`` ...).
Each table lists the spellings in the order they are tried; dotted keys reach into nested
dicts (``attn_config.kv_n_heads``). Per-architecture structure that a config does not state
(gated MLP or not, tied embeddings by default, position embedding kind) is in ``ARCH_FACTS``.
Adding an architecture means adding rows here, not code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lmi_build.model.spec import PositionEmbedding

HIDDEN_SIZE = ("hidden_size", "n_embd", "n_embed", "d_model")
NUM_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers")
NUM_DECODER_LAYERS = ("num_decoder_layers", "decoder_layers")
NUM_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads")
HEAD_DIM = ("head_dim", "d_kv", "kv_channels")
VOCAB_SIZE = ("padded_vocab_size", "vocab_size")
INTERMEDIATE_SIZE = (
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "ffn_hidden_size",
    "d_ff",
    "inner_hidden_size",
    "ffn_config.ffn_hidden_size",
    "encoder_ffn_dim",
)
# Tried in order. Qwen (v1) declares both seq_length (8192, its training length) and
# max_position_embeddings (32768); we take max_position_embeddings because Qwen's dynamic-NTK +
# logn attention (use_dynamic_ntk/use_logn_attn) is what makes 32k usable, and TensorRT-LLM's
# Qwen converter also reads max_position_embeddings. ChatGLM2/3 only have seq_length.
MAX_POSITIONS = (
    "max_position_embeddings",
    "n_positions",
    "seq_length",
    "max_seq_len",
    "max_sequence_length",
    "model_max_length",
    "n_ctx",
)
NUM_EXPERTS = ("num_local_experts", "num_experts", "moe_num_experts", "ffn_config.moe_num_experts", "n_routed_experts")
# The width of one routed expert where it differs from the dense MLP's intermediate_size (Qwen2-MoE, DeepSeek-V2).
MOE_INTERMEDIATE_SIZE = ("moe_intermediate_size",)
# Always-on experts beside the routed ones: Qwen2-MoE states their total width (plus a one-output gate),
# DeepSeek-V2 a count of routed-width experts.
SHARED_EXPERT_SIZE = ("shared_expert_intermediate_size",)
SHARED_EXPERTS = ("n_shared_experts",)
# Leading decoder layers with a dense MLP instead of experts (DeepSeek-V2 first_k_dense_replace).
DENSE_LAYERS = ("first_k_dense_replace",)
# Multi-head latent attention (DeepSeek-V2): Q (optionally low-rank) and a low-rank joint KV projection.
MLA_KV_LORA_RANK = ("kv_lora_rank",)
MLA_Q_LORA_RANK = ("q_lora_rank",)
MLA_QK_NOPE_DIM = ("qk_nope_head_dim",)
MLA_QK_ROPE_DIM = ("qk_rope_head_dim",)
MLA_V_HEAD_DIM = ("v_head_dim",)
EXPERTS_PER_TOKEN = ("num_experts_per_tok", "moe_top_k", "ffn_config.moe_top_k")
ROPE_THETA = ("rope_theta", "rotary_emb_base", "rotary_base", "rope_parameters.rope_theta")
ROPE_SCALING = ("rope_scaling", "rope_parameters")
# GPT-J gives rotary_dim directly; these give a fraction of head_dim.
ROTARY_DIM = ("rotary_dim",)
ROTARY_FRACTION = ("partial_rotary_factor", "rotary_pct", "rope_parameters.partial_rotary_factor")
DTYPE = ("torch_dtype", "dtype")
# The rope_scaling types a build reads: lmi-build's exports and quantization construct the model with the
# installed transformers, which has a rotary embedding for these only (transformers 4.57.6
# src/transformers/modeling_rope_utils.py:521-528 ROPE_INIT_FUNCTIONS, "default" being no scaling): another
# type is a KeyError when the model is built, and vLLM's get_rope refuses it at start-up.
ROPE_SCALING_TYPES = ("linear", "dynamic", "yarn", "longrope", "llama3")
# Older spellings a model type's own config class rewrites before that lookup (4.57.6
# models/phi3/configuration_phi3.py:192-196: su, yarn -> longrope; models/qwen2_vl/configuration_qwen2_vl.py:245-248
# and qwen2_5_vl/configuration_qwen2_5_vl.py:256-259: mrope -> default).
ROPE_SCALING_RENAMED = {"phi3": ("su", "yarn"), "qwen2_vl": ("mrope",), "qwen2_5_vl": ("mrope",)}
# Qwen (v1) states its dtype as boolean flags instead.
DTYPE_FLAGS = (("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32"))
DTYPE_NAMES = {
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


@dataclass(frozen=True)
class KvRule:
    """KV heads come from ``key`` (or are ``value``) when every ``when`` condition holds."""

    key: str | None = None
    value: int | None = None
    when: tuple[tuple[str, Any], ...] = ()


# First rule that applies wins; no rule -> MHA (KV heads = attention heads).
KV_HEAD_RULES: tuple[KvRule, ...] = (
    KvRule(key="num_key_value_heads"),
    KvRule(key="n_head_kv"),  # Falcon RefinedWeb (40B)
    KvRule(key="num_kv_heads", when=(("new_decoder_architecture", True),)),  # Falcon (new config)
    KvRule(value=1, when=(("multi_query", True),)),  # Falcon-7B, GPT-BigCode: MQA
    KvRule(key="multi_query_group_num", when=(("multi_query_attention", True),)),  # ChatGLM2/3
    KvRule(key="attn_config.kv_n_heads", when=(("attn_config.attn_type", "grouped_query_attention"),)),
    KvRule(value=1, when=(("attn_config.attn_type", "multiquery_attention"),)),  # MPT MQA
    KvRule(key="attn_config.kv_n_heads", when=(("model_type", "dbrx"),)),
)


@dataclass(frozen=True)
class PositionRule:
    """The position embedding is ``kind`` when ``key`` equals ``value`` in the config."""

    key: str
    value: Any
    kind: PositionEmbedding


@dataclass(frozen=True)
class ArchFacts:
    """What a config does not say but the architecture implies (for shapes and parameter counts)."""

    gated_mlp: bool = True  # three MLP matrices (gate/up/down) instead of two
    tie_word_embeddings: bool = False  # the transformers config class default when the key is absent
    position: PositionEmbedding = "rope"
    position_rules: tuple[PositionRule, ...] = ()  # first matching rule overrides `position`
    ffn_multiplier: float = 4.0  # intermediate size = multiplier * hidden when no key gives it
    ffn_multiplier_key: str | None = None  # a config key holding the multiplier (MPT expansion_ratio)
    ffn_divisor: int = 1  # Qwen (v1) states intermediate_size as twice its per-branch width
    gated_key: tuple[str, str] | None = None  # (key, prefix): gated when the value starts with prefix
    rotary_fraction: float | None = None  # rotary dims / head_dim when the config does not state it
    default_max_positions: int | None = None  # the config class default when no key gives it
    position_offset: int = 0  # learned position table rows beyond max positions (OPT: 2)
    parallel_norms: int = 2  # norms per decoder layer


_LLAMA = ArchFacts()
_FALCON = ArchFacts(
    gated_mlp=False,
    tie_word_embeddings=True,
    position_rules=(PositionRule("alibi", True, "alibi"),),
    # FalconConfig's default; the original RW configs state no length (trained at 2048).
    default_max_positions=2048,
)
_GPT2 = ArchFacts(gated_mlp=False, tie_word_embeddings=True, position="learned")
_MPT = ArchFacts(
    gated_mlp=False,
    tie_word_embeddings=True,
    position="none",
    position_rules=(
        PositionRule("attn_config.alibi", True, "alibi"),
        PositionRule("learned_pos_emb", True, "learned"),
    ),
    ffn_multiplier_key="expansion_ratio",
)

ARCH_FACTS: dict[str, ArchFacts] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": _LLAMA,
    "internlm": _LLAMA,
    "internlm2": _LLAMA,
    "aquila": _LLAMA,
    "Yi": _LLAMA,
    "qwen2": _LLAMA,
    "deci": _LLAMA,
    "gemma": ArchFacts(tie_word_embeddings=True),
    # transformers Gemma2Config(tie_word_embeddings=True) (models/gemma2/configuration_gemma2.py);
    # google/gemma-2-9b's config.json has no tie_word_embeddings key.
    "gemma2": ArchFacts(tie_word_embeddings=True),
    "baichuan": ArchFacts(
        # Baichuan 13B (v1 and v2) uses ALiBi, the 7B models RoPE (TensorRT-LLM examples/baichuan).
        position_rules=(PositionRule("hidden_size", 5120, "alibi"),),
    ),
    "qwen": ArchFacts(ffn_divisor=2),
    "chatglm": ArchFacts(rotary_fraction=0.5, parallel_norms=2),
    "falcon": _FALCON,
    "RefinedWeb": _FALCON,
    "RefinedWebModel": _FALCON,
    "gpt2": _GPT2,
    "gpt_bigcode": _GPT2,
    "opt": ArchFacts(gated_mlp=False, tie_word_embeddings=True, position="learned", position_offset=2),
    "gptj": ArchFacts(gated_mlp=False, parallel_norms=1),
    "gpt_neox": ArchFacts(gated_mlp=False),
    "phi": ArchFacts(gated_mlp=False, parallel_norms=1),
    "bloom": ArchFacts(gated_mlp=False, tie_word_embeddings=True, position="alibi"),
    "mpt": _MPT,
    "dbrx": ArchFacts(position="rope"),
    "t5": ArchFacts(
        gated_mlp=False,
        tie_word_embeddings=True,
        position="relative",
        gated_key=("feed_forward_proj", "gated"),
    ),
}
DEFAULT_FACTS = ArchFacts()


@dataclass(frozen=True)
class QuantAliases:
    """Spellings of pre-quantization fields across AutoAWQ, AutoGPTQ, compressed-tensors, ModelOpt."""

    bits: tuple[str, ...] = ("bits", "w_bit", "num_bits", "weight_bits")
    group_size: tuple[str, ...] = ("group_size", "q_group_size")
    desc_act: tuple[str, ...] = ("desc_act",)
    zero_point: tuple[str, ...] = ("zero_point",)
    version: tuple[str, ...] = ("version",)
    quant_algo: tuple[str, ...] = ("quant_algo", "quantization.quant_algo")
    # bitsandbytes states its width as flags.
    bit_flags: tuple[tuple[str, int], ...] = field(default=(("load_in_4bit", 4), ("load_in_8bit", 8)))


QUANT_ALIASES = QuantAliases()
# quant_method spellings -> our canonical names.
QUANT_METHODS = {
    "awq": "awq",
    "gptq": "gptq",
    "fp8": "fp8",
    "modelopt": "modelopt",
    "bitsandbytes": "bitsandbytes",
    "compressed-tensors": "compressed-tensors",
    "compressed_tensors": "compressed-tensors",
    "squeezellm": "squeezellm",
    "aqlm": "aqlm",
    "eetq": "eetq",
    "hqq": "hqq",
    "fbgemm_fp8": "fp8",
}
