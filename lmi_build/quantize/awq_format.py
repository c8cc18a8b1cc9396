"""Write an AWQ-calibrated model in the AutoAWQ ("GEMM") checkpoint format vLLM and LMI-Dist load.

ModelOpt's unified export keeps AWQ's per-input-channel ``pre_quant_scale`` as tensors that only
ModelOpt-aware loaders apply (TensorRT-LLM); vLLM's ``awq``/``awq_marlin`` loaders have no such
tensor, so the scales are folded into the layers before them first, with ModelOpt's own fusions:
o_proj's into v_proj's output rows (query heads sharing a KV head get their average, o_proj is
requantized to it), down_proj's into up_proj's, and q/k/v's and gate/up's (averaged, requantized)
into the RMSNorm weights before them. Then, per linear (``quantization_config.quant_method =
"awq"``, ``zero_point: true``, ``version: "gemm"``):

- ``qweight`` int32 ``[in, out/8]``: eight 4-bit unsigned values along the output dimension,
  column ``8j + [0, 2, 4, 6, 1, 3, 5, 7][k]`` in bits ``4k..4k+3`` of word ``j`` (AutoAWQ's
  interleave, undone by vLLM's dequantizer);
- ``qzeros`` int32 ``[in/group, out/8]``: zero points packed the same way, stored as they are (8);
- ``scales`` ``[in/group, out]`` in the checkpoint dtype. Dequantized: ``(q - z) * s``.

Each fact's source in vLLM (tag, path, line): ``lmi_build/targets/hf/data/serving_formats.toml``,
``[[format]] name = "awq"``. The integers are ModelOpt's own (``int4_pack``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmi_build.core.errors import StepError
from lmi_build.quantize import int4_pack
from lmi_build.quantize.int4_pack import BITS, PACK, ZERO_POINT
from lmi_build.quantize.placement import Placement

PACKED_SUFFIXES = ("qweight", "qzeros", "scales")
# AutoAWQ's order of the 8 output columns within a word (vLLM's awq_pack interleave).
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def quantization_config(group_size: int) -> dict[str, Any]:
    """config.json ``quantization_config`` (the keys vLLM's AWQConfig.from_config reads, plus
    ``version`` for transformers' AwqConfig)."""
    return {"quant_method": "awq", "bits": BITS, "group_size": group_size, "zero_point": True, "version": "gemm"}


def pack_linear(weight: Any, amax: Any, group_size: int, dtype: Any) -> dict[str, Any]:
    """The three AWQ tensors of one ``[out, in]`` weight with per-group ``amax`` (``out * in/group``)."""
    import torch

    out_features, in_features = weight.shape
    int4_pack.check_shape(out_features, in_features, group_size, "AWQ")
    ints, scale = int4_pack.integers(weight, amax, group_size)
    unsigned = (ints + ZERO_POINT).t().reshape(in_features, out_features // PACK, PACK)  # [in, out/8, 8]
    zeros = torch.full((in_features // group_size, out_features // PACK, PACK), ZERO_POINT)
    return {
        "qweight": int4_pack.pack_words(unsigned, AWQ_ORDER),
        "qzeros": int4_pack.pack_words(zeros, AWQ_ORDER),
        "scales": scale.t().contiguous().to(dtype),
    }


def fold_pre_quant_scales(model: Any) -> None:
    """Fold every AWQ ``pre_quant_scale`` into the layer before it (ModelOpt's fusions, see the
    module docstring); refuse a model where one is left (an architecture ModelOpt cannot fuse)."""
    import torch
    from modelopt.torch.export.quant_utils import fuse_prequant_to_linear
    from modelopt.torch.export.unified_export_hf import requantize_resmooth_fused_llm_layers

    with torch.no_grad():
        fuse_prequant_to_linear(model, fuse_grouped_heads=True)
        requantize_resmooth_fused_llm_layers(model)
    left = sorted(name for name, module in model.named_modules()
                  if getattr(getattr(module, "input_quantizer", None), "pre_quant_scale", None) is not None)
    if left:
        raise StepError(f"AWQ scales of {len(left)} layers cannot be folded into the AutoAWQ format "
                        f"(first: {left[0]})",
                        hint="use --quantize gptq or fp8 (lmi-build plan hf names the containers that load "
                             "each)")


def write_checkpoint(model: Any, placement: Placement, group_size: int, staging: Path) -> list[str]:
    """Fold the AWQ scales, pack every INT4-quantized linear of the calibrated ``model`` (still in
    its calibration dtype), cast the rest to the export dtype and save; returns notes."""
    fold_pre_quant_scales(model)
    count = int4_pack.write_int4_checkpoint(model, placement, group_size, staging, pack=pack_linear,
                                            quantization_config=quantization_config(group_size), label="AWQ")
    return [f"folded AWQ pre_quant_scale into the preceding norms/linears; wrote {count} AutoAWQ-packed "
            f"linear layers (quant_method awq, {BITS}-bit, group {group_size}, zero point {ZERO_POINT})"]
