"""Write a GPTQ-calibrated model in the GPTQ checkpoint format vLLM and LMI-Dist load.

ModelOpt 0.47 exports GPTQ'd INT4 blocks only in its own unified format, labelled ``W4A16_AWQ``,
which those engines do not load as GPTQ. This writes the AutoGPTQ "v1" layout that vLLM's
``gptq``/``gptq_marlin`` loaders read (``quantization_config.quant_method = "gptq"``), per linear:

- ``qweight`` int32 ``[in/8, out]``: eight 4-bit unsigned values along the input dimension,
  value ``k`` of a word in bits ``4k..4k+3``;
- ``qzeros`` int32 ``[in/group, out/8]``: the zero points packed the same way along the output
  dimension, stored minus one (v1 convention; the loaders add it back): symmetric 4-bit -> 7;
- ``scales`` ``[in/group, out]`` in the checkpoint dtype; ``g_idx`` int32 ``[in]`` = i // group.

Each fact's source in vLLM (tag, path, line): ``lmi_build/targets/hf/data/serving_formats.toml``,
``[[format]] name = "gptq"``. The integers are ModelOpt's own (``int4_pack``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmi_build.quantize import int4_pack
from lmi_build.quantize.int4_pack import BITS, PACK, ZERO_POINT
from lmi_build.quantize.placement import Placement

PACKED_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")


def quantization_config(group_size: int) -> dict[str, Any]:
    """config.json ``quantization_config`` (the keys vLLM's GPTQConfig.from_config reads)."""
    return {"quant_method": "gptq", "bits": BITS, "group_size": group_size, "desc_act": False, "sym": True,
            "checkpoint_format": "gptq", "static_groups": False, "true_sequential": True}


def pack_linear(weight: Any, amax: Any, group_size: int, dtype: Any) -> dict[str, Any]:
    """The four GPTQ tensors of one ``[out, in]`` weight with per-group ``amax`` (``out * in/group``)."""
    import torch

    out_features, in_features = weight.shape
    int4_pack.check_shape(out_features, in_features, group_size, "GPTQ")
    ints, scale = int4_pack.integers(weight, amax, group_size)
    unsigned = (ints + ZERO_POINT).t()  # [in, out]
    by_word = unsigned.reshape(in_features // PACK, PACK, out_features).transpose(1, 2)  # [in/8, out, 8]
    zeros = torch.full((in_features // group_size, out_features // PACK, PACK), ZERO_POINT - 1)
    return {
        "qweight": int4_pack.pack_words(by_word),
        "qzeros": int4_pack.pack_words(zeros),
        "scales": scale.t().contiguous().to(dtype),
        "g_idx": torch.arange(in_features, dtype=torch.int32) // group_size,
    }


def write_checkpoint(model: Any, placement: Placement, group_size: int, staging: Path) -> list[str]:
    """Pack every INT4-quantized linear of the calibrated ``model`` (still in its calibration dtype),
    cast the rest to the export dtype and save; returns notes for the result."""
    count = int4_pack.write_int4_checkpoint(model, placement, group_size, staging, pack=pack_linear,
                                            quantization_config=quantization_config(group_size), label="GPTQ")
    return [f"wrote {count} GPTQ-packed linear layers (quant_method gptq, {BITS}-bit, group {group_size})"]
