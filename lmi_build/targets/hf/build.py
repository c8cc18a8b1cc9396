"""Build the ``hf`` target: the source checkpoint as is, or converted/quantized by ModelOpt."""

from __future__ import annotations

import shlex
from pathlib import Path

from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.planning.saved import SavedPlan
from lmi_build.targets.hf.checkpoint import build_hf_checkpoint
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.hf.layouts import LAYOUTS

CHECKPOINT_DIR = "hf-checkpoint"


def preflight(saved: SavedPlan, settings: BuildSettings) -> None:
    """Nothing beyond the plan: the checkpoint step reads only the model and the calibration data."""


def finish_command(plan_file: Path, *, output: Path) -> str:
    """``lmi-build hf --plan ...``: the command that builds a saved plan into ``output``, shell-quoted."""
    return shlex.join(["lmi-build", "hf", "--plan", str(plan_file), "--output", str(output)])


def build(ctx: BuildContext) -> None:
    plan = ctx.plan
    knobs = plan.knobs(HfBuild)
    ctx.layout = LAYOUTS["hf"]
    if plan.quantization.method is None and plan.spec.torch_dtype == knobs.dtype:
        ctx.produced = ctx.source.path  # the source's safetensors as they are
        return
    detail = plan.quantization.quant_algo or f"dtype {knobs.dtype}"
    name = "quantize" if plan.quantization.method else "convert"
    estimate = plan.checkpoint_step.seconds if plan.checkpoint_step is not None else None
    with ctx.record.timed(name, detail=detail, estimate_s=estimate):
        result = build_hf_checkpoint(plan, ctx.source.path, ctx.work / CHECKPOINT_DIR,
                                     calib_file=ctx.inputs.calib_data, use_cache=ctx.settings.use_cache)
    ctx.record.record_checkpoint(name, result)
    ctx.produced = result.out_dir
