"""Build the ``hf`` target: the source checkpoint as is, or converted/quantized by ModelOpt."""

from __future__ import annotations

from lmi_build.building.context import BuildContext
from lmi_build.planning.plan import HfBuild


def build(ctx: BuildContext) -> None:
    plan = ctx.plan
    assert isinstance(plan.build, HfBuild)
    ctx.layout = "hf"
    needs_step = plan.quantization.method is not None or plan.spec.torch_dtype != plan.build.dtype
    if not needs_step:
        ctx.produced = ctx.source.path
        return
    from lmi_build.quantize.export import run_checkpoint_step

    detail = plan.quantization.quant_algo or f"dtype {plan.build.dtype}"
    name = "quantize" if plan.quantization.method else "convert"
    with ctx.record.timed(name, detail=detail):
        result = run_checkpoint_step(plan, ctx.source.path, ctx.work, calib_file=ctx.inputs.calib_data,
                                     use_cache=ctx.settings.use_cache)
    ctx.record.record_checkpoint(name, result)
    ctx.produced = result.out_dir
