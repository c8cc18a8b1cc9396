"""What the GPTQ and AutoAWQ checkpoint writers share: ModelOpt's INT4 integers, 4-bit packing
into int32 words, the check against ModelOpt's own fake quantization, and the save.

ModelOpt's INT4 block quantization (AWQ, GPTQ, RTN) is symmetric: ``q = round(w * (7 / amax))``
clipped to [-8, 7], in float32 (``modelopt/torch/quantization/tensor_quant.py``, ``_tensor_quant``,
ModelOpt 0.47.0). The integers are computed with exactly that expression: ``w / (amax / 7)`` is
the same number in exact arithmetic but not in float32, and a weight at exactly half a step
(``w = amax / 2`` is common in bf16 weights) lands on 3.5 one way and 3.4999998 the other, so
round-half-to-even picks different integers. The vLLM loaders' formats are unsigned with a zero
point: ``(u - z) * scale``; ``u = q + 8`` and ``z = 8`` represent every one of ModelOpt's values
exactly. The layouts, with their sources in vLLM, are in
``lmi_build/targets/hf/data/serving_formats.toml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lmi_build.core.errors import StepError
from lmi_build.quantize.placement import Placement, cast_for_export

BITS = 4
PACK = 32 // BITS  # values per int32 word
ZERO_POINT = 2 ** (BITS - 1)  # 8: symmetric INT4 as unsigned
MAX_INT = ZERO_POINT - 1  # ModelOpt's scale is amax / 7
AMAX_EPSILON = 1.0 / (1 << 24)  # ModelOpt's _tensor_quant: an amax at or below this quantizes to 0

# (weight [out, in], amax, group size, export dtype) -> the tensors that replace ``weight``
PackLinear = Callable[[Any, Any, int, Any], dict[str, Any]]


def check_shape(out_features: int, in_features: int, group_size: int, name: str) -> None:
    if in_features % group_size or in_features % PACK or out_features % PACK:
        raise StepError(f"cannot pack a {out_features}x{in_features} weight into {name} groups of {group_size}",
                        hint=f"{name} needs input and output sizes that are multiples of 8 and of the group size")


def integers(weight: Any, amax: Any, group_size: int) -> tuple[Any, Any]:
    """ModelOpt's signed INT4 values ``[out, in]`` of ``weight`` and the per-group scales
    ``[out, in/group]`` (float32)."""
    import torch

    out_features, in_features = weight.shape
    groups = in_features // group_size
    group_amax = amax.detach().float().reshape(out_features, groups)
    # ModelOpt's _tensor_quant: multiply by a tensor division max_bound / amax (a Python number
    # over a tensor is computed as reciprocal times the number, one more rounding), and a group
    # whose amax is at most 2^-24 quantizes to zeros.
    max_bound = torch.tensor(float(MAX_INT), dtype=torch.float32)
    zero_group = group_amax <= AMAX_EPSILON
    inverse = torch.where(zero_group, 0.0, max_bound / group_amax.clamp_min(AMAX_EPSILON))
    blocks = weight.detach().float().reshape(out_features, groups, group_size)
    ints = torch.round(blocks * inverse.unsqueeze(-1)).clamp(-ZERO_POINT, MAX_INT)
    return ints.reshape(out_features, in_features), group_amax / MAX_INT


def pack_words(values: Any, order: Sequence[int] | None = None) -> Any:
    """int32 words from unsigned 4-bit ``values`` whose last dimension holds 8 per word: value
    ``order[k]`` (default ``k``) of each 8 goes to bits ``4k..4k+3``."""
    import torch

    if order is not None:
        values = values[..., list(order)]
    shifts = torch.arange(PACK, dtype=torch.int64) * BITS
    words = (values.to(torch.int64) << shifts).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # same 32 bits, signed


def check_against_fake_quant(name: str, module: Any, quantizer: Any, ints: Any, scale: Any,
                             group_size: int) -> None:
    """The integers times their scales must be ModelOpt's own fake-quantized weight."""
    import torch

    with torch.no_grad():
        expected = quantizer(module.weight.detach().float()).float()
    per_column = scale.repeat_interleave(group_size, dim=1)
    rebuilt = ints * per_column
    # The integers are computed with ModelOpt's own expression, so every one must agree (the
    # dequantized values differ only in float32's last bit: amax / 7 versus 1 / (7 / amax)).
    step = per_column.clamp_min(torch.finfo(torch.float32).tiny)
    wrong = int(((rebuilt - expected).abs() > 0.5 * step).sum())
    if wrong:
        raise StepError(f"INT4 packing of {name} disagrees with ModelOpt's quantized weight in {wrong} values",
                        hint="this is a toolchain mismatch (ModelOpt version); report it with --debug output")


def write_int4_checkpoint(model: Any, placement: Placement, group_size: int, staging: Path, *,
                          pack: PackLinear, quantization_config: dict[str, Any], label: str) -> int:
    """Replace the weight of every INT4-quantized linear of the calibrated ``model`` (still in its
    calibration dtype, pre_quant_scale already folded) by ``pack``'s tensors, cast the rest to the
    export dtype, save, and set config.json's ``quantization_config``; returns the layer count."""
    import torch

    dtype = getattr(torch, placement.export_dtype)
    packed: dict[str, dict[str, Any]] = {}
    for name, module in model.named_modules():
        quantizer = getattr(module, "weight_quantizer", None)
        if quantizer is None or not quantizer.is_enabled or getattr(quantizer, "num_bits", None) != BITS:
            continue
        ints, scale = integers(module.weight, quantizer.amax, group_size)
        check_against_fake_quant(name, module, quantizer, ints, scale, group_size)
        packed[name] = pack(module.weight, quantizer.amax, group_size, dtype)
    if not packed:
        raise StepError(f"{label}: no linear layer was quantized to INT4", hint="report this with --debug output")
    model = cast_for_export(model, placement)
    state = {k: v for k, v in model.state_dict().items() if "_quantizer." not in k}
    for name, tensors in packed.items():
        del state[f"{name}.weight"]
        state.update({f"{name}.{suffix}": tensor.contiguous() for suffix, tensor in tensors.items()})
    model.save_pretrained(str(staging), state_dict=state, safe_serialization=True)
    config_path = staging / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = quantization_config
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return len(packed)
