"""The shared machinery of the checkpoint steps (the trtllm and hf targets' exports, on this host):
load and quantize the model as planned, the checkpoint cache around a step, where it runs, and the
small file helpers the exporters share. ``tensorrt_llm`` is never imported.

Each target's own export (what it writes and how it checks it against its knobs) lives in the target
package: ``lmi_build.targets.trtllm.checkpoint``, ``lmi_build.targets.hf.checkpoint``.
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmi_build.core.errors import StepError
from lmi_build.core.fs import link_or_copy
from lmi_build.planning.context import read_written
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import BuildPlan
from lmi_build.quantize import calibration as calib
from lmi_build.quantize import modelopt_quant
from lmi_build.quantize.calibration import CalibrationSummary
from lmi_build.quantize.checkpoint_cache import CheckpointCache, checkpoint_key
from lmi_build.quantize.placement import Placement, cast_for_export, choose_placement
from lmi_build.quantize.result import CheckpointResult
from lmi_build.reporting import output

# Files of a pre-quantized HF checkpoint that carry weights or their description.
_PASSTHROUGH_SUFFIXES = (".safetensors",)
_PASSTHROUGH_NAMES = ("config.json", "generation_config.json", "model.safetensors.index.json",
                      "hf_quant_config.json", "quant_config.json", "quantize_config.json")


def through_cache(plan: BuildPlan, model_dir: Path, out_dir: Path, checkpoint_format: str, shaping: dict[str, Any],
                  use_cache: bool, produce: Callable[[], CheckpointResult], *, dtype: str) -> CheckpointResult:
    """``produce()``, or its cached result when an entry for exactly these inputs verifies;
    ``shaping``: the target's knobs that shape the checkpoint (dtype, tp, pp, format, ...)."""
    if not use_cache:
        return produce()

    cache = CheckpointCache()
    # Calibration on a GPU (in the export dtype) and on the CPU (in float32) give slightly different
    # scales: the placement this host would use is part of what decides the checkpoint.
    calibrated = plan.quantization.method is not None and plan.quantization.calibration is not None
    key, material = checkpoint_key(plan, model_dir, checkpoint_format, shaping,
                                   calibrated_on=placement_for(plan, dtype) if calibrated else None)
    hit = cache.restore(key, out_dir)
    if hit is not None:
        output.current().info(f"reused the cached checkpoint {key[:19]}… (verified)")
        return hit
    result = produce()
    cache.store(key, material, result)
    return result


def placement_for(plan: BuildPlan, dtype: str) -> Placement:
    quant = plan.quantization
    return choose_placement(dtype, runs_forward=quant.method is not None and quant.calibration is not None)


def prepare_model(plan: BuildPlan, model_dir: Path, dtype: str, calib_file: Path | None, *,
                   cast: bool = True) -> tuple[Any, CalibrationSummary | None, Placement]:
    """Load, quantize as planned, and return the model in the export dtype ``dtype`` (``cast=False``:
    still in the calibration dtype, for an exporter that casts itself). Where it is calibrated (GPU
    in ``dtype``, or CPU in float32 then cast) is ``placement.choose_placement``'s choice: exported
    dtypes and norms are ``dtype`` either way."""
    trust = bool(read_written(plan.options, CommonOptions).trust_remote_code)
    quant = plan.quantization
    where = placement_for(plan, dtype)
    modelopt_quant.set_deterministic(quant.calibration.seed if quant.calibration else 1234)
    with quiet_libraries():  # "Loading checkpoint shards", deprecation notices
        model = modelopt_quant.load_model(model_dir, where.load_dtype, trust, device_map=where.device_map)
    if quant.method is None:
        return model, None, where
    batches = None
    if quant.calibration is not None:
        with quiet_libraries():
            tokenizer = calib.load_tokenizer(model_dir, trust)
        batches = calib.build_batches(quant.calibration, tokenizer, calib_file)
    output.current().info(f"quantizing with {quant.method} ({quant.quant_algo}) on {where.describe()}")
    with quiet_libraries():
        modelopt_quant.quantize(model, quant, batches)
    summary = batches.summary() if batches is not None else None
    return (cast_for_export(model, where) if cast else model), summary, where


def pass_through(model_dir: Path, staging: Path) -> None:
    for source in sorted(model_dir.iterdir()):
        if source.is_file() and (source.suffix in _PASSTHROUGH_SUFFIXES or source.name in _PASSTHROUGH_NAMES):
            link_or_copy(source, staging / source.name)  # same bytes, no copy; the source is never modified


def quiet_libraries() -> contextlib.AbstractContextManager[None]:
    """ModelOpt and transformers print, log and warn as they work (ranks, quantizer counts,
    deprecations, tied weights): all of it goes to the debug log (--debug), never to stdout, which
    belongs to results (``--json``), nor to the console."""
    return output.current().library_output()


def output_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def peak_rss() -> int:
    """This process's peak resident set so far, in bytes.

    On Linux the memory map's own high-water mark (VmHWM): ru_maxrss keeps the peak of the process
    that forked us across exec, so a build started by a large parent (a test runner, a fleet worker)
    would report the parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StepError(f"the export wrote no {path.name}", hint="report this with --debug output")
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=4) + "\n")
