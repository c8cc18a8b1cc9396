"""Write a GPTQ-calibrated model in the GPTQ checkpoint format vLLM and LMI-Dist load.

ModelOpt 0.47 exports GPTQ'd INT4 blocks only in its own unified format, labelled ``W4A16_AWQ``,
which those engines do not load as GPTQ. This writes the AutoGPTQ "v1" layout that vLLM's
``gptq``/``gptq_marlin`` loaders read (``quantization_config.quant_method = "gptq"``), per linear:

- ``qweight`` int32 ``[in/8, out]``: eight 4-bit unsigned values along the input dimension,
  value ``k`` of a word in bits ``4k..4k+3``;
- ``qzeros`` int32 ``[in/group, out/8]``: the zero points packed the same way along the output
  dimension, stored minus one (v1 convention; the loaders add it back): symmetric 4-bit -> 7;
- ``scales`` ``[in/group, out]`` in the checkpoint dtype; ``g_idx`` int32 ``[in]`` = i // group.

The integers are ModelOpt's own: ``round(w / (amax / 7))`` clipped to [-8, 7], checked against its
fake-quantized weight before anything is written. Symmetric INT4 with zero point 8 represents
every one of them exactly: ``(u - 8) * scale`` with ``u = q + 8``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmi_build.errors import StepError
from lmi_build.quantize.placement import Placement, cast_for_export

BITS = 4
PACK = 32 // BITS  # values per int32 word
ZERO_POINT = 2 ** (BITS - 1)  # 8: symmetric INT4 as unsigned
MAX_INT = ZERO_POINT - 1  # ModelOpt's scale is amax / 7
PACKED_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")


def quantization_config(group_size: int) -> dict[str, Any]:
    """config.json ``quantization_config`` (the keys vLLM's GPTQConfig.from_config reads)."""
    return {"quant_method": "gptq", "bits": BITS, "group_size": group_size, "desc_act": False, "sym": True,
            "checkpoint_format": "gptq", "static_groups": False, "true_sequential": True}


def pack_linear(weight: Any, amax: Any, group_size: int, dtype: Any) -> dict[str, Any]:
    """The four GPTQ tensors of one ``[out, in]`` weight with per-group ``amax`` (``out * in/group``)."""
    import torch

    out_features, in_features = weight.shape
    if in_features % group_size or in_features % PACK or out_features % PACK:
        raise StepError(f"cannot pack a {out_features}x{in_features} weight into GPTQ groups of {group_size}",
                        hint="GPTQ needs input and output sizes that are multiples of 8 and of the group size")
    groups = in_features // group_size
    scale = amax.detach().float().reshape(out_features, groups) / MAX_INT
    blocks = weight.detach().float().reshape(out_features, groups, group_size)
    ints = torch.round(blocks / scale.unsqueeze(-1)).clamp(-ZERO_POINT, MAX_INT).reshape(out_features, in_features)
    unsigned = (ints + ZERO_POINT).to(torch.int64).t().contiguous()  # [in, out]
    shifts = torch.arange(PACK, dtype=torch.int64) * BITS
    qweight = (unsigned.reshape(in_features // PACK, PACK, out_features) << shifts.view(1, PACK, 1)).sum(1)
    zeros = torch.full((groups, out_features // PACK, PACK), ZERO_POINT - 1, dtype=torch.int64)
    qzeros = (zeros << shifts.view(1, 1, PACK)).sum(-1)
    return {
        "qweight": _as_int32(qweight),
        "qzeros": _as_int32(qzeros),
        "scales": scale.t().contiguous().to(dtype),
        "g_idx": (torch.arange(in_features, dtype=torch.int32) // group_size),
        "_ints": ints,  # for the check against ModelOpt's fake quantization; never written
    }


def unpack_qweight(qweight: Any) -> Any:
    """The unsigned 4-bit values ``[in, out]`` of a packed ``qweight`` (the loaders' reading)."""
    import torch

    words = qweight.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(PACK, dtype=torch.int64) * BITS
    values = (words.unsqueeze(1) >> shifts.view(1, PACK, 1)) & 0xF  # [in/8, 8, out]
    return values.reshape(-1, qweight.shape[1])


def write_gptq_checkpoint(model: Any, placement: Placement, group_size: int, staging: Path) -> list[str]:
    """Pack every INT4-quantized linear of the calibrated ``model`` (still in its calibration dtype),
    cast the rest to the export dtype and save; returns notes for the result."""
    import torch

    dtype = getattr(torch, placement.export_dtype)
    packed: dict[str, dict[str, Any]] = {}
    for name, module in model.named_modules():
        quantizer = getattr(module, "weight_quantizer", None)
        if quantizer is None or not quantizer.is_enabled or getattr(quantizer, "num_bits", None) != BITS:
            continue
        tensors = pack_linear(module.weight, quantizer.amax, group_size, dtype)
        _check_against_fake_quant(name, module, quantizer, tensors, group_size)
        tensors.pop("_ints")
        packed[name] = tensors
    if not packed:
        raise StepError("GPTQ quantized no linear layer", hint="report this with --debug output")
    model = cast_for_export(model, placement)
    state = {k: v for k, v in model.state_dict().items() if "_quantizer." not in k}
    for name, tensors in packed.items():
        del state[f"{name}.weight"]
        state.update({f"{name}.{suffix}": tensor.contiguous() for suffix, tensor in tensors.items()})
    model.save_pretrained(str(staging), state_dict=state, safe_serialization=True)
    config_path = staging / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = quantization_config(group_size)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return [f"wrote {len(packed)} GPTQ-packed linear layers (quant_method gptq, {BITS}-bit, group {group_size})"]


def _check_against_fake_quant(name: str, module: Any, quantizer: Any, tensors: dict[str, Any],
                              group_size: int) -> None:
    """The packed integers times their scales must be ModelOpt's own fake-quantized weight."""
    import torch

    with torch.no_grad():
        expected = quantizer(module.weight.detach().float()).float()
    out_features = expected.shape[0]
    scale = tensors["scales"].float().t().repeat_interleave(group_size, dim=1)
    rebuilt = tensors["_ints"] * (quantizer.amax.detach().float().reshape(out_features, -1) / MAX_INT
                                  ).repeat_interleave(group_size, dim=1)
    # Integers must agree exactly (a rounding tie may flip one value: allow one step per layer).
    step = scale.clamp_min(torch.finfo(torch.float32).tiny)
    wrong = int(((rebuilt - expected).abs() > 0.5 * step).sum())
    if wrong > 1:
        raise StepError(f"GPTQ packing of {name} disagrees with ModelOpt's quantized weight in {wrong} values",
                        hint="this is a toolchain mismatch (ModelOpt version); report it with --debug output")


def _as_int32(values: Any) -> Any:
    """int64 words holding 32 unsigned bits -> int32 with the same bits."""
    import torch

    return torch.where(values >= 2**31, values - 2**32, values).to(torch.int32)
