"""Where calibration runs: CUDA (all visible GPUs, target dtype) when present, else CPU in float32."""

from __future__ import annotations

import pytest

from lmi_build.quantize.placement import choose_placement, visible_cuda_devices


def test_gpu_host_calibrates_on_every_gpu_in_the_target_dtype() -> None:
    where = choose_placement("bfloat16", runs_forward=True, cuda_devices=4)
    assert (where.device, where.gpus, where.device_map) == ("cuda", 4, "auto")
    assert where.load_dtype == where.export_dtype == "bfloat16"
    assert not where.casts_before_export
    assert where.describe() == "4 GPUs in bfloat16"


def test_cpu_calibrates_in_float32_and_casts_before_export() -> None:
    where = choose_placement("float16", runs_forward=True, cuda_devices=0)
    assert (where.device, where.gpus, where.device_map) == ("cpu", 0, None)
    assert (where.load_dtype, where.export_dtype) == ("float32", "float16")
    assert where.casts_before_export
    assert where.describe() == "CPU in float32, cast to float16 for export"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_no_forward_pass_loads_the_target_dtype_directly(dtype: str) -> None:
    # Conversion and weight-only methods: float32 would only double the host memory.
    where = choose_placement(dtype, runs_forward=False, cuda_devices=0)
    assert where.load_dtype == where.export_dtype == dtype


@pytest.mark.slow  # imports torch
def test_detection_follows_torch() -> None:
    import torch

    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert visible_cuda_devices() == expected
    assert choose_placement("float16", runs_forward=True).device == ("cuda" if expected else "cpu")
