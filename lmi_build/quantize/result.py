"""What a checkpoint step (conversion or quantization on the build host) produced: read by the
manifest's step record and kept with a checkpoint cache entry."""

from pathlib import Path
from typing import Literal

from lmi_build.core.target_names import TargetName
from lmi_build.core.types import FrozenModel
from lmi_build.quantize.calibration import CalibrationSummary
from lmi_build.quantize.placement import Placement


class CheckpointResult(FrozenModel):
    format: TargetName  # the target whose checkpoint layout it is
    out_dir: Path
    files: list[str]  # relative paths, sorted
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None
    dtype: str
    tp: int = 1
    pp: int = 1
    seconds: float
    peak_rss_bytes: int  # this process's peak resident set so far (includes loading the model)
    calibration: CalibrationSummary | None = None
    pre_quantized: bool = False  # the input was already quantized and passed through unchanged
    notes: list[str] = []  # adjustments made to what ModelOpt wrote, one line each
    placement: Placement | None = None  # where the model was loaded/calibrated; None: passed through
    cached: bool = False  # restored from the checkpoint cache (verified), nothing was recomputed
    # trtllm: who wrote the tensors (a planned stream may fall back to ModelOpt's exporter); None: hf
    writer: Literal["modelopt", "stream"] | None = None
