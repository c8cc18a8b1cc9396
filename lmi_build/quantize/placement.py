"""Where calibration runs and in which dtype (imports torch lazily).

On a GPU host the model is calibrated on CUDA in the target dtype, its weights spread over every
visible GPU by accelerate (``device_map="auto"``), so a model larger than one GPU still fits.
Without a GPU it is calibrated on CPU in float32 and cast to the target dtype before export: this
CPU runs fp16 matmul ~8x slower than fp32 (18 vs 153 GFLOP/s measured) and bf16 has no fast path
either, and the result is the same within the tests' logit-error bounds: only the weights are cast,
the calibrated ``amax`` values stay float32 as in a target-dtype calibration, and the export computes
the scales from them.
Steps that run no forward pass (conversion, weight-only methods without KV-cache scales) load in
the target dtype directly: float32 would only double the host memory.
"""

from typing import Any, Literal

from lmi_build.core.types import FrozenModel
from lmi_build.planning.checkpoint_estimate import calibration_load_dtype

Device = Literal["cpu", "cuda"]


class Placement(FrozenModel):
    device: Device
    gpus: int  # visible CUDA devices (0 on CPU)
    load_dtype: str  # the dtype the model is loaded and calibrated in
    export_dtype: str  # the dtype the checkpoint is written in (the plan's)

    @property
    def device_map(self) -> str | None:
        """accelerate's placement for ``from_pretrained``: every visible GPU, or none (CPU)."""
        return "auto" if self.device == "cuda" else None

    @property
    def casts_before_export(self) -> bool:
        return self.load_dtype != self.export_dtype

    def describe(self) -> str:
        where = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.device == "cuda" else "CPU"
        cast = f", cast to {self.export_dtype} for export" if self.casts_before_export else ""
        return f"{where} in {self.load_dtype}{cast}"


def choose_placement(export_dtype: str, *, runs_forward: bool, cuda_devices: int | None = None) -> Placement:
    """The placement for a checkpoint step. ``cuda_devices`` overrides detection (None: ask torch)."""
    gpus = visible_cuda_devices() if cuda_devices is None else cuda_devices
    device: Device = "cuda" if gpus > 0 else "cpu"
    # One rule for the plan's estimate and the step (planning.checkpoint_estimate).
    load_dtype = calibration_load_dtype(device, export_dtype, runs_forward=runs_forward)
    return Placement(device=device, gpus=gpus, load_dtype=load_dtype, export_dtype=export_dtype)


def visible_cuda_devices() -> int:
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def cast_for_export(model: Any, placement: Placement) -> Any:
    """The calibrated model with its weights in the export dtype. The calibrated ranges (``amax``)
    stay float32: ``model.to(dtype)`` would round them to bf16/fp16 (ModelOpt 0.47 protects them
    only in its block-scale quantizer). AWQ's ``pre_quant_scale`` multiplies the activations in
    the forward pass, so it takes the activations' dtype, as in a target-dtype calibration."""
    if not placement.casts_before_export:
        return model
    import torch
    from modelopt.torch.quantization.nn import TensorQuantizer

    dtype = getattr(torch, placement.export_dtype)
    for module in model.modules():
        if isinstance(module, TensorQuantizer):
            scale = getattr(module, "_pre_quant_scale", None)
            if scale is not None:
                module._buffers["_pre_quant_scale"] = scale.to(dtype)
            continue
        for param in module.parameters(recurse=False):
            if param.is_floating_point():
                param.data = param.data.to(dtype)
        for name, buffer in list(module.named_buffers(recurse=False)):
            # Non-persistent buffers (rotary inv_freq) are built in float32 by a target-dtype load too.
            if buffer.is_floating_point() and name not in module._non_persistent_buffers_set:
                module._buffers[name] = buffer.to(dtype)
    # save_pretrained writes config.dtype from the model's; keep the config in step with it.
    # transformers >= 4.56 names it `dtype`; `torch_dtype` is then a property that logs a deprecation.
    renamed = isinstance(getattr(type(model.config), "torch_dtype", None), property)
    setattr(model.config, "dtype" if renamed else "torch_dtype", dtype)
    return model
