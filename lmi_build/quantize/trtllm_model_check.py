"""A TensorRT-LLM checkpoint (or ModelOpt's layout of one) against the model it is made from.

Whatever wrote the checkpoint (ModelOpt's exporter, the streamed writer from a cached layout), its
config.json and its rank files must describe the model's config.json: the same sizes, layers, heads,
vocabulary and activation, every rank present, every layer's tensors, the embedding on the first
pipeline rank and ``lm_head`` on the last. A layout that parses but lost a tensor or changed a field
would otherwise build an engine that runs and answers wrongly.

What ModelOpt writes was measured (nvidia-modelopt 0.47.0, transformers 4.57, weightless models
through ``trtllm_stream._exported_layout``, tp 2 and pp 2): for LlamaForCausalLM (tied and untied),
MistralForCausalLM and Qwen2ForCausalLM the checkpoint's ``architecture``, ``hidden_act``,
``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` and
``vocab_size`` (unpadded) are the model's, ``lm_head.weight`` is on every last-pipeline rank (tied
embeddings too) and ``transformer.vocab_embedding.weight`` on every first-pipeline rank. For other
architectures only the sizes are compared (inferred: the same fields, not measured), and an
encoder-decoder model (another config shape) is not compared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from typing import Any

# The architectures whose checkpoint was measured field by field and tensor by tensor (see above).
MEASURED_ARCHITECTURES = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"})
SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")
EMBEDDING = "transformer.vocab_embedding.weight"
LAST_RANK_TENSORS = ("lm_head.weight", "transformer.ln_f.weight")
_LAYER = re.compile(r"transformer\.layers\.(\d+)\.(.+)")


def model_problems(config: Mapping[str, Any], rank_tensors: Mapping[int, Set[str]], model_config: Mapping[str, Any],
                   *, tp: int, pp: int, uniform_layers: bool = True) -> list[str]:
    """What in ``config`` (the checkpoint's config.json) and ``rank_tensors`` (rank -> tensor names)
    does not describe the model of ``model_config`` (its config.json) split ``tp`` x ``pp``; one
    line each. ``uniform_layers``: every layer holds the same tensors (an unquantized llama-like
    model; quantization may leave some layers unquantized)."""
    if model_config.get("is_encoder_decoder"):
        return []
    expected = dict(model_config)
    expected.setdefault("num_key_value_heads", model_config.get("num_attention_heads"))
    problems = [f"{name}={config.get(name)!r} (the model's config.json: {expected[name]!r})"
                for name in SIZE_FIELDS if expected.get(name) is not None and config.get(name) != expected[name]]
    architectures = model_config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    if architecture not in MEASURED_ARCHITECTURES:
        return problems
    if config.get("architecture") != architecture:
        problems.append(f"architecture={config.get('architecture')!r} (the model's config.json: {architecture!r})")
    if "hidden_act" in model_config and config.get("hidden_act") != model_config["hidden_act"]:
        problems.append(f"hidden_act={config.get('hidden_act')!r} "
                        f"(the model's config.json: {model_config['hidden_act']!r})")
    layers = expected.get("num_hidden_layers")
    return problems + tensor_problems(rank_tensors, layers if isinstance(layers, int) else None, tp=tp, pp=pp,
                                      uniform_layers=uniform_layers)


def tensor_problems(rank_tensors: Mapping[int, Set[str]], layers: int | None, *, tp: int, pp: int,
                    uniform_layers: bool = True) -> list[str]:
    """Every rank present once; the embedding on the first pipeline rank, ``lm_head`` and the final
    norm on the last; each pipeline rank's layers numbered from 0, the same on each of its tensor
    ranks, adding up to ``layers``; with ``uniform_layers`` every layer holding the same tensors."""
    if set(rank_tensors) != set(range(tp * pp)):
        return [f"ranks {sorted(rank_tensors)} (tp {tp} x pp {pp} makes ranks 0-{tp * pp - 1})"]
    per_rank = [_layer_tensors(rank_tensors[rank]) for rank in range(tp * pp)]
    # Every layer must hold what the first layer found holds (tensor names after the layer's prefix).
    reference = next((held for layers_of in per_rank for _, held in sorted(layers_of.items())), None)
    problems: list[str] = []
    for rank, per_layer in enumerate(per_rank):
        problems += _placement_problems(rank, rank_tensors, tp=tp, pp=pp)
        if sorted(per_layer) != list(range(len(per_layer))):
            problems.append(f"rank{rank}'s layers are numbered {sorted(per_layer)[:8]}, not from 0 without gaps")
        if uniform_layers and reference is not None:
            problems += _layer_differing(rank, per_layer, reference)[:1]  # the first per rank
    total = sum(len(per_rank[stage * tp]) for stage in range(pp))  # a stage's layers are on each of its tp ranks
    if layers is not None and total != layers:
        problems.append(f"the rank files hold {total} layers, the model's config.json num_hidden_layers is {layers}")
    return problems[:8]


def _layer_tensors(names: Set[str]) -> dict[int, set[str]]:
    """Layer number -> the names after its ``transformer.layers.<n>.`` prefix."""
    per_layer: dict[int, set[str]] = {}
    for found in filter(None, map(_LAYER.fullmatch, names)):
        per_layer.setdefault(int(found.group(1)), set()).add(found.group(2))
    return per_layer


def _placement_problems(rank: int, rank_tensors: Mapping[int, Set[str]], *, tp: int, pp: int) -> list[str]:
    """The first stage's embedding, the last stage's tensors, the same tensors as the stage's rank 0."""
    stage, tp_rank = divmod(rank, tp)
    names = rank_tensors[rank]
    needed = ([EMBEDDING] if stage == 0 else []) + (list(LAST_RANK_TENSORS) if stage == pp - 1 else [])
    problems = [f"rank{rank} has no {name}" for name in needed if name not in names]
    if tp_rank and names != rank_tensors[stage * tp]:
        problems.append(f"rank{rank} holds other tensors than rank{stage * tp} (same pipeline stage)")
    return problems


def _layer_differing(rank: int, per_layer: Mapping[int, set[str]], reference: set[str]) -> list[str]:
    """Each of a rank's layers that does not hold ``reference``, and what differs."""
    return [f"rank{rank} layer {layer} differs from the others "
            f"({', '.join((sorted(reference - held) or sorted(held - reference))[:3])})"
            for layer, held in sorted(per_layer.items()) if held != reference]
