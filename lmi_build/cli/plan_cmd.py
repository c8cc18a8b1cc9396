"""``lmi-build plan``: resolve and validate a build without running it."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, cast

import typer

from lmi_build.cli.app import EndpointOpt
from lmi_build.cli.plan_flags import (
    AllowPickleOpt,
    CalibDataOpt,
    ContextLengthEstimateOpt,
    DtypeOpt,
    GpuOpt,
    InstanceTypeOpt,
    MaxBatchSizeOpt,
    MaxInputLenOpt,
    MaxOutputLenOpt,
    ModelOpt,
    NPositionsOpt,
    OptionOpt,
    PlanFlags,
    PpOpt,
    ProfileOpt,
    PropertiesOpt,
    QuantizeOpt,
    RevisionOpt,
    SaveOpt,
    StrictOpt,
    TpOpt,
    TrustRemoteCodeOpt,
)
from lmi_build.output import current

if TYPE_CHECKING:
    from lmi_build.types import TargetName

EPILOG = """[bold]Examples[/bold]

  lmi-build plan trtllm --model meta-llama/Llama-2-7b-hf --tp 2 --quantize awq --instance-type g5.12xlarge

  lmi-build plan neuronx --model ./llama-2-7b --tp 8 --n-positions 4096 --max-batch-size 4 --json

  lmi-build plan hf --model demo:tiny-llama --properties serving.properties -o option.dtype=bf16

Exit status: 0 valid plan, 2 invalid plan (the plan is still printed), 1 other errors."""


class PlanTarget(str, Enum):
    trtllm = "trtllm"
    neuronx = "neuronx"
    hf = "hf"


def register(app: typer.Typer) -> None:
    app.command("plan", epilog=EPILOG)(plan)


def plan(
    target: PlanTarget = typer.Argument(..., help="What to build: trtllm engines, neuronx NEFFs, or an hf checkpoint."),
    model: ModelOpt = None,
    revision: RevisionOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    dtype: DtypeOpt = None,
    quantize: QuantizeOpt = None,
    max_input_len: MaxInputLenOpt = None,
    max_output_len: MaxOutputLenOpt = None,
    max_batch_size: MaxBatchSizeOpt = None,
    n_positions: NPositionsOpt = None,
    context_length_estimate: ContextLengthEstimateOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    option: OptionOpt = None,
    properties: PropertiesOpt = None,
    instance_type: InstanceTypeOpt = None,
    gpu: GpuOpt = None,
    profile: ProfileOpt = None,
    strict: StrictOpt = False,
    calib_data: CalibDataOpt = None,
    allow_pickle: AllowPickleOpt = False,
    endpoint_url: EndpointOpt = None,
    save: SaveOpt = None,
) -> None:
    """Resolve every build knob, validate it against the model, estimate memory and compute the
    cache key, without reading weights or building anything."""
    from lmi_build.planner import plan_request
    from lmi_build.planning.render import report_plan

    flags = PlanFlags(model=model, revision=revision, tp=tp, pp=pp, dtype=dtype, quantize=quantize,
                      max_input_len=max_input_len, max_output_len=max_output_len, max_batch_size=max_batch_size,
                      n_positions=n_positions, context_length_estimate=context_length_estimate,
                      trust_remote_code=trust_remote_code, option=option, properties=properties,
                      instance_type=instance_type, profile=profile, strict=strict, calib_data=calib_data,
                      allow_pickle=allow_pickle, endpoint_url=endpoint_url, gpu=gpu)
    saved = plan_request(flags.request(cast("TargetName", target.value)))
    report_plan(saved.plan)
    if save is not None:
        saved.save(save)  # an invalid plan is saved too (for review); builds refuse it
        current().info(f"plan saved to {save}")
    if not saved.plan.valid:
        raise typer.Exit(2)
