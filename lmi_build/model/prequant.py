"""Recognise checkpoints that are already quantized, from ``quantization_config`` and its kin.

Sources, in order: ``quantization_config`` in config.json (AutoAWQ, AutoGPTQ/GPTQModel, fp8,
ModelOpt unified, bitsandbytes, compressed-tensors); then, for directories, ModelOpt's
``hf_quant_config.json`` and AutoAWQ's legacy ``quant_config.json`` beside config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmi_build.model.aliases import QUANT_ALIASES, QUANT_METHODS
from lmi_build.model.lookup import first_present, get_path
from lmi_build.model.spec import PreQuantization

# Methods whose weights are 8-bit floating point by definition.
_FP8_METHODS = frozenset({"fp8"})


def parse_quantization_config(qcfg: Mapping[str, Any], *, default_method: str | None = None) -> PreQuantization:
    """A ``quantization_config`` (or sibling file) as a ``PreQuantization``."""
    raw_method = str(qcfg.get("quant_method") or default_method or "unknown")
    method = QUANT_METHODS.get(raw_method.lower(), raw_method.lower())
    fields = _weight_fields(qcfg)

    bits = _int(first_present(fields, QUANT_ALIASES.bits))
    if bits is None:
        bits = next((width for flag, width in QUANT_ALIASES.bit_flags if fields.get(flag) is True), None)
    if bits is None and method in _FP8_METHODS:
        bits = 8
    version = first_present(fields, QUANT_ALIASES.version)
    if version is None and method == "compressed-tensors":
        version = ("format", qcfg.get("format"))
    quant_algo = first_present(qcfg, QUANT_ALIASES.quant_algo)
    return PreQuantization(
        method=method,
        bits=bits,
        group_size=_int(first_present(fields, QUANT_ALIASES.group_size)),
        desc_act=_bool(first_present(fields, QUANT_ALIASES.desc_act)),
        zero_point=_bool(first_present(fields, QUANT_ALIASES.zero_point)),
        version=str(version[1]).lower() if version and version[1] is not None else None,
        quant_algo=str(quant_algo[1]) if quant_algo else None,
        raw=dict(qcfg),
    )


def modelopt_quant_config(hf_quant_config: Mapping[str, Any]) -> PreQuantization:
    """ModelOpt's ``hf_quant_config.json``: ``{"producer": ..., "quantization": {"quant_algo": ...}}``."""
    section = hf_quant_config.get("quantization")
    fields = section if isinstance(section, Mapping) else hf_quant_config
    return parse_quantization_config({**fields, "quant_method": "modelopt"})


def _weight_fields(qcfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """compressed-tensors nests bits/group size under ``config_groups.<group>.weights``."""
    groups = qcfg.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = get_path(group, "weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                return {**qcfg, **weights}
    return qcfg


def _int(found: tuple[str, Any] | None) -> int | None:
    if found is None:
        return None
    try:
        return int(found[1])
    except (TypeError, ValueError):
        return None


def _bool(found: tuple[str, Any] | None) -> bool | None:
    return bool(found[1]) if found is not None else None
