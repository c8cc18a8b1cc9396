"""The INT4 packer against ModelOpt's own fake quantization, on the layer shapes real models have.

A bf16 checkpoint loaded in float32 (how the CPU calibrates) has many weights at exactly half a
quantization step of their group's amax (``w = amax / 2``: 3.5 steps), and many more within a
float32 rounding of some half step. There the integer depends on the float32 expression, so the
packer must compute ModelOpt's (``round(w * (7 / amax))``, a tensor division): ``w / (amax / 7)``
disagreed in thousands of values of a 3072 x 8192 weight (issue 42, item 1). The weight quantizer
is ModelOpt's, with the quantizer configuration AWQ uses (INT4, blocks of 128) and max calibration
in place of the AWQ scale search: the search chooses amax, the fake quantization of a given amax
is the same quantizer's.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lmi_build.quantize import awq_format, int4_pack

GROUP = 128

# (out_features, in_features): Llama-3.2-3B's down_proj whole (intermediate 8192 -> hidden 3072,
# the layer issue 42 failed on), and 256 rows of the input widths of Llama-2-7B / Llama-3.1-8B
# (hidden 4096, intermediates 11008 and 14336): each width's groups of 128, at a tenth of the cost.
REAL_SHAPES = [(3072, 8192), (256, 4096), (256, 11008), (256, 14336)]


def _quantized_linear(out_features: int, in_features: int) -> Any:
    """A bf16-valued float32 linear with ModelOpt's INT4 AWQ weight quantizer, amax calibrated."""
    import modelopt.torch.quantization as mtq
    import torch

    generator = torch.Generator().manual_seed(out_features + in_features)
    model = torch.nn.Sequential(torch.nn.Linear(in_features, out_features, bias=False))
    with torch.no_grad():
        weight = torch.randn(out_features, in_features, generator=generator) * 0.02
        model[0].weight.copy_(weight.to(torch.bfloat16).float())
    config = copy.deepcopy(mtq.INT4_AWQ_CFG)
    config["algorithm"] = "max"
    mtq.quantize(model, config, forward_loop=lambda m: m(torch.zeros(1, in_features)))
    return model[0]


def _unpack_awq(qweight: Any, out_features: int) -> Any:
    """The unsigned ``[out, in]`` values of an AutoAWQ ``qweight`` ``[in, out/8]``."""
    import torch

    columns = torch.stack([(qweight >> (4 * k)) & 0xF for k in range(8)], dim=-1)  # [in, out/8, 8]
    undo = torch.argsort(torch.tensor(awq_format.AWQ_ORDER))
    return columns[..., undo].reshape(qweight.shape[0], out_features).t()


@pytest.mark.slow  # torch and ModelOpt: ~5 s of CPU for the 25 M-value weight, ~1 s for the rest
@pytest.mark.parametrize(("out_features", "in_features"), REAL_SHAPES)
def test_awq_packing_is_modelopts_fake_quant_on_real_shapes(out_features: int, in_features: int) -> None:
    import torch

    linear = _quantized_linear(out_features, in_features)
    quantizer = linear.weight_quantizer
    with torch.no_grad():
        expected = quantizer(linear.weight.detach()).float()
    tensors = awq_format.pack_linear(linear.weight, quantizer.amax, GROUP, torch.float32)
    signed = _unpack_awq(tensors["qweight"], out_features).float() - int4_pack.ZERO_POINT
    per_column = tensors["scales"].t().repeat_interleave(GROUP, dim=1)
    # ModelOpt's integers: its dequantized value over its scale is an integer to a float32 rounding.
    assert torch.equal(signed, torch.round(expected / per_column))
    assert torch.allclose(signed * per_column, expected, rtol=1e-6, atol=0.0)
    int4_pack.check_against_fake_quant("proj", linear, quantizer, *int4_pack.integers(
        linear.weight, quantizer.amax, GROUP), GROUP)


@pytest.mark.slow  # torch
def test_a_zero_group_packs_to_zero_integers() -> None:
    """ModelOpt quantizes a group whose amax is at most 2^-24 to zeros (no division by zero)."""
    import torch

    weight = torch.zeros(8, 2 * GROUP)
    weight[:, GROUP:] = torch.linspace(-1.0, 1.0, 8 * GROUP).reshape(8, GROUP)
    amax = weight.reshape(8, 2, GROUP).abs().amax(-1).reshape(-1, 1)
    ints, scale = int4_pack.integers(weight, amax, GROUP)
    assert torch.equal(ints[:, :GROUP], torch.zeros(8, GROUP))
    assert torch.isfinite(ints).all() and torch.equal(scale[:, 0], torch.zeros(8))
    assert int(ints[:, GROUP:].abs().max()) == int4_pack.MAX_INT
