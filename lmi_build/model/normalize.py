"""``config.json`` -> ``ModelSpec``: one shape for every Hugging Face config, without torch.

Every fact is read through the alias tables in ``lmi_build.model.aliases``; what a config leaves
unsaid comes from the architecture facts there. Nothing here imports transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lmi_build.core.errors import SourceError
from lmi_build.core.reading import BadFile, parse_json, read_regular_bytes
from lmi_build.model import aliases as A
from lmi_build.model.lookup import first_present, get_path, matches
from lmi_build.model.native import native_names
from lmi_build.model.params import Mla, Shapes, estimate_parameters
from lmi_build.model.prequant import modelopt_quant_config, parse_quantization_config
from lmi_build.model.spec import ModelSpec, PositionEmbedding, PreQuantization, RopeSpec

# Sibling files that describe a pre-quantized checkpoint when config.json does not.
_MODELOPT_QUANT_FILE = "hf_quant_config.json"
_AUTOAWQ_LEGACY_FILE = "quant_config.json"


def read_spec_file(path: Path) -> ModelSpec:
    """Read ``path`` (a config.json, or the directory holding one) into a ``ModelSpec``."""
    config_path = path / "config.json" if path.is_dir() else path
    config = _load_json(config_path, what="model config")
    if not isinstance(config, dict):
        raise SourceError(
            f"{config_path} is not a JSON object",
            hint="point at the config.json of a Hugging Face model",
        )
    sibling_quant = None if "quantization_config" in config else _sibling_quantization(config_path.parent)
    return read_spec(config, quantization=sibling_quant, origin=str(config_path))


def read_spec(
    config: Mapping[str, Any],
    *,
    quantization: PreQuantization | None = None,
    origin: str = "config.json",
) -> ModelSpec:
    """Normalise a parsed config.json. ``quantization`` describes a pre-quantized checkpoint whose
    config has no ``quantization_config`` (read from sibling files by ``read_spec_file``).

    A config.json is input from anywhere (a hub repository, a bucket): a value of the wrong type
    (``"factor": "abc"``, ``NaN`` positions) is one ``SourceError`` naming the file, never a traceback."""
    try:
        return _read_spec(config, quantization=quantization, origin=origin)
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise SourceError(f"{origin} holds a value lmi-build cannot read ({exc})",
                          hint="fix the config.json; numbers must be finite, sizes whole numbers") from None


def _read_spec(config: Mapping[str, Any], *, quantization: PreQuantization | None, origin: str) -> ModelSpec:
    model_type = str(config.get("model_type") or "")
    stated_architectures = config.get("architectures") or ()
    if not isinstance(stated_architectures, list | tuple) or \
            not all(isinstance(a, str) for a in stated_architectures):
        raise SourceError(f"{origin}: architectures must be a list of class names, not {stated_architectures!r}",
                          hint="fix the config.json, e.g. \"architectures\": [\"LlamaForCausalLM\"]")
    architectures = tuple(stated_architectures)
    if not model_type and not architectures:
        raise SourceError(
            f"{origin} has neither model_type nor architectures",
            hint="use the config.json of a Hugging Face transformers model",
        )
    facts = A.ARCH_FACTS.get(model_type, A.DEFAULT_FACTS)

    hidden = _required_int(config, A.HIDDEN_SIZE, "hidden size", origin)
    layers = _required_int(config, A.NUM_LAYERS, "number of layers", origin)
    heads = _required_int(config, A.NUM_HEADS, "number of attention heads", origin)
    vocab = _required_int(config, A.VOCAB_SIZE, "vocabulary size", origin)
    kv_heads = _kv_heads(config, heads)
    if not 0 < kv_heads <= heads:
        raise SourceError(f"{origin} states {kv_heads} key/value heads for {heads} attention heads",
                          hint="key/value heads must be between 1 and the number of attention heads")
    head_dim = _int_or(first_present(config, A.HEAD_DIM), hidden // heads)
    is_enc_dec = bool(config.get("is_encoder_decoder", False))
    decoder_layers = _int_or(first_present(config, A.NUM_DECODER_LAYERS), layers) if is_enc_dec else None
    intermediate = _intermediate(config, facts, hidden)
    max_pos, max_pos_source = _max_positions(config, facts)
    position = _position(config, facts)
    num_experts = _int_or(first_present(config, A.NUM_EXPERTS), None)
    tie = config.get("tie_word_embeddings")
    tie_embeddings = facts.tie_word_embeddings if tie is None else bool(tie)
    learned_rows = (max_pos or 0) + facts.position_offset if position == "learned" else 0

    shapes = Shapes(
        hidden_size=hidden,
        num_layers=layers,
        num_decoder_layers=decoder_layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        gated_mlp=_gated(config, facts),
        num_experts=num_experts,
        tie_word_embeddings=tie_embeddings,
        learned_positions=learned_rows,
        norms_per_layer=facts.parallel_norms,
        **_moe_shapes(config, num_experts),
    )
    return ModelSpec(
        model_type=model_type or architectures[0],
        architectures=architectures,
        hidden_size=hidden,
        num_layers=layers,
        num_decoder_layers=decoder_layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        max_position_source=max_pos_source,
        position_embedding=position,
        rope=_rope(config, facts, head_dim) if position == "rope" else None,
        num_experts=num_experts,
        experts_per_token=_int_or(first_present(config, A.EXPERTS_PER_TOKEN), None) if num_experts else None,
        tie_word_embeddings=tie_embeddings,
        torch_dtype=_dtype(config),
        is_encoder_decoder=is_enc_dec,
        auto_map=dict(config.get("auto_map") or {}),
        requires_remote_code=_requires_remote_code(model_type, architectures),
        pre_quantization=_pre_quantization(config) or quantization,
        num_parameters=estimate_parameters(shapes),
        raw=dict(config),
    )


# Above this a size is nonsense (the largest models have ~10^5 hidden units, ~10^6 vocabulary rows).
MAX_SIZE = 1 << 24


def _required_int(config: Mapping[str, Any], keys: tuple[str, ...], what: str, origin: str) -> int:
    found = first_present(config, keys)
    if found is not None and isinstance(found[1], float) and math.isfinite(found[1]) and not found[1].is_integer():
        raise SourceError(f"{origin}: {found[0]}={found[1]} is not a whole number",
                          hint=f"the {what} must be a whole number")
    value = _int_or(found, None)
    if value is not None and value > MAX_SIZE:
        raise SourceError(f"{origin}: {found[0] if found else what}={value} is not a plausible {what}",
                          hint=f"the {what} must be at most {MAX_SIZE}")
    if value is None or value <= 0:
        raise SourceError(
            f"{origin} states no valid {what} (looked for {', '.join(keys)})",
            hint="use the config.json of a Hugging Face transformers decoder or encoder-decoder model",
        )
    return value


def _int_or(found: tuple[str, Any] | None, default: int | None) -> Any:
    if found is None:
        return default
    value = found[1]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    if isinstance(value, float) and not math.isfinite(value):
        return default  # Infinity / NaN (JSON extensions Python accepts): not a size
    return int(value)


def _kv_heads(config: Mapping[str, Any], heads: int) -> int:
    for rule in A.KV_HEAD_RULES:
        if not matches(config, rule.when):
            continue
        if rule.value is not None:
            return rule.value
        value = _int_or(first_present(config, (rule.key,)) if rule.key else None, None)
        if value:
            return int(value)
    return heads


def _moe_shapes(config: Mapping[str, Any], num_experts: int | None) -> dict[str, Any]:
    """The parameter-count shapes of fine-grained and shared experts and of latent attention (params.Shapes)."""
    found: dict[str, Any] = {}
    kv_rank = _int_or(first_present(config, A.MLA_KV_LORA_RANK), None)
    if kv_rank:
        found["mla"] = Mla(kv_lora_rank=kv_rank, q_lora_rank=_int_or(first_present(config, A.MLA_Q_LORA_RANK), None),
                           qk_nope_head_dim=_int_or(first_present(config, A.MLA_QK_NOPE_DIM), 0) or 0,
                           qk_rope_head_dim=_int_or(first_present(config, A.MLA_QK_ROPE_DIM), 0) or 0,
                           v_head_dim=_int_or(first_present(config, A.MLA_V_HEAD_DIM), 0) or 0)
    if not num_experts:
        return found
    expert = _int_or(first_present(config, A.MOE_INTERMEDIATE_SIZE), None)
    found["moe_intermediate_size"] = expert
    shared_size = _int_or(first_present(config, A.SHARED_EXPERT_SIZE), None)
    shared_count = _int_or(first_present(config, A.SHARED_EXPERTS), None)
    if shared_size:
        found["shared_expert_size"], found["shared_expert_gate"] = shared_size, True
    elif shared_count and expert:
        found["shared_expert_size"] = shared_count * expert
    found["dense_layers"] = _int_or(first_present(config, A.DENSE_LAYERS), 0) or 0
    return found


def _intermediate(config: Mapping[str, Any], facts: A.ArchFacts, hidden: int) -> int:
    stated = _int_or(first_present(config, A.INTERMEDIATE_SIZE), None)
    if stated:
        return int(stated) // facts.ffn_divisor
    multiplier = facts.ffn_multiplier
    if facts.ffn_multiplier_key:
        found = first_present(config, (facts.ffn_multiplier_key,))
        if found is not None and isinstance(found[1], int | float):
            multiplier = float(found[1])
    return int(hidden * multiplier)


def _max_positions(config: Mapping[str, Any], facts: A.ArchFacts) -> tuple[int | None, str | None]:
    found = first_present(config, A.MAX_POSITIONS)
    if found is not None and found[1] is not None and (isinstance(found[1], bool) or
                                                        not isinstance(found[1], int | float)):
        raise ValueError(f"{found[0]}={found[1]!r} is not a number")
    if found is not None and isinstance(found[1], float) and not math.isfinite(found[1]):
        # NaN / Infinity used to fall back to the architecture's default length, silently.
        raise ValueError(f"{found[0]}={found[1]!r} is not a finite number")
    value = _int_or(found, None)
    if found is not None and value:
        return int(value), found[0]
    if _position(config, facts) == "alibi":
        return None, None  # ALiBi has no position table, so no hard limit
    if facts.default_max_positions:
        return facts.default_max_positions, "default"
    return None, None


def _position(config: Mapping[str, Any], facts: A.ArchFacts) -> PositionEmbedding:
    for rule in facts.position_rules:
        if matches(config, ((rule.key, rule.value),)):
            return rule.kind
    return facts.position


def _gated(config: Mapping[str, Any], facts: A.ArchFacts) -> bool:
    if facts.gated_key:
        key, prefix = facts.gated_key
        return str(get_path(config, key, "")).startswith(prefix)
    return facts.gated_mlp


def _rope(config: Mapping[str, Any], facts: A.ArchFacts, head_dim: int) -> RopeSpec:
    scaling = _rope_scaling(config)
    rotary_dim = _int_or(first_present(config, A.ROTARY_DIM), None)
    if rotary_dim is None:
        fraction = first_present(config, A.ROTARY_FRACTION)
        share = float(fraction[1]) if fraction is not None else facts.rotary_fraction
        rotary_dim = int(head_dim * share) if share is not None else None
    theta = first_present(config, A.ROPE_THETA)
    theta_value = float(theta[1]) if theta is not None else 10000.0
    factor = scaling[1].get("factor") if scaling else None
    factor_value = float(factor) if factor is not None else None
    for name, number in (("rope_theta", theta_value), ("rope scaling factor", factor_value)):
        if number is not None and not (math.isfinite(number) and number > 0):
            raise ValueError(f"{name} {number} is not a finite positive number")
    original = scaling[1].get("original_max_position_embeddings") if scaling else None
    return RopeSpec(theta=theta_value, scaling_type=scaling[0] if scaling else None, scaling_factor=factor_value,
                    original_max_position_embeddings=int(original) if original is not None else None,
                    rotary_dim=rotary_dim, raw_scaling=dict(scaling[1]) if scaling else None)


def _rope_scaling(config: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(type, block) of the config's RoPE scaling; None without one or with the "default" type (none)."""
    scaling = next((value for key in A.ROPE_SCALING if isinstance(value := get_path(config, key), Mapping)), None)
    kind = scaling.get("rope_type") or scaling.get("type") if scaling is not None else None
    return (str(kind), scaling) if scaling is not None and kind and kind != "default" else None


def _dtype(config: Mapping[str, Any]) -> str | None:
    found = first_present(config, A.DTYPE)
    if found is not None:
        name = str(found[1]).removeprefix("torch.")
        return A.DTYPE_NAMES.get(name.lower(), name)
    for flag, name in A.DTYPE_FLAGS:
        if config.get(flag) is True:
            return name
    return None


def _requires_remote_code(model_type: str, architectures: tuple[str, ...]) -> bool:
    """Remote code is needed when transformers lacks the model type or an architecture class.

    An ``auto_map`` alone does not decide it: transformers prefers its own class for a model type
    it knows (phi-2 still ships an auto_map for PhiForCausalLM, which transformers has).
    """
    native = native_names()
    if model_type and model_type not in native.model_types:
        return True
    return any(arch not in native.architectures for arch in architectures)


def _pre_quantization(config: Mapping[str, Any]) -> PreQuantization | None:
    qcfg = config.get("quantization_config")
    if isinstance(qcfg, Mapping) and qcfg:
        return parse_quantization_config(qcfg)
    return None


def _sibling_quantization(directory: Path) -> PreQuantization | None:
    modelopt_file = directory / _MODELOPT_QUANT_FILE
    if modelopt_file.is_file():
        data = _load_json(modelopt_file, what="ModelOpt quantization config")
        if isinstance(data, Mapping):
            return modelopt_quant_config(data)
    legacy_awq = directory / _AUTOAWQ_LEGACY_FILE
    if legacy_awq.is_file():
        data = _load_json(legacy_awq, what="AutoAWQ quantization config")
        if isinstance(data, Mapping):
            return parse_quantization_config(data, default_method="awq")
    return None


def _load_json(path: Path, *, what: str) -> Any:
    if not path.is_file():
        raise SourceError(
            f"no {what} at {path}",
            hint="pass a model directory that contains config.json, or the config.json itself",
        )
    try:
        return parse_json(read_regular_bytes(path, what=what), what=f"{what} {path}")
    except BadFile as exc:
        raise SourceError(exc.message, hint=exc.hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"cannot read {path}: {exc}", hint="check the file's permissions") from exc
    except json.JSONDecodeError as exc:
        raise SourceError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            hint="fix or re-download the file",
        ) from exc
    except RecursionError:
        raise SourceError(f"{path} is nested too deeply to be a {what}", hint="fix or re-download the file") from None
