"""``lmi-build plan``: resolve and validate a build without running it."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, cast

import typer

from lmi_build.cli.app import JsonOpt, QuietOpt, output_mode
from lmi_build.cli.plan_flags import (
    AllowPickleOpt,
    CalibDataOpt,
    ContextLengthEstimateOpt,
    DtypeOpt,
    InstanceTypeOpt,
    MaxBatchSizeOpt,
    MaxInputLenOpt,
    MaxOutputLenOpt,
    ModelOpt,
    NPositionsOpt,
    OptionOpt,
    PpOpt,
    ProfileOpt,
    PropertiesOpt,
    QuantizeOpt,
    RevisionOpt,
    StrictOpt,
    TpOpt,
    TrustRemoteCodeOpt,
    plan_request,
)

if TYPE_CHECKING:
    from lmi_build.planning.plan import TargetName

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
    profile: ProfileOpt = None,
    strict: StrictOpt = False,
    calib_data: CalibDataOpt = None,
    allow_pickle: AllowPickleOpt = False,
    json_output: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Resolve every build knob, validate it against the model, estimate memory and compute the
    cache key, without reading weights or building anything."""
    flags = {k: v for k, v in locals().items() if k not in ("target", "json_output", "quiet")}
    output_mode(json_output, quiet)
    from lmi_build.planning.planner import make_plan
    from lmi_build.planning.render import report_plan

    request = plan_request(cast("TargetName", target.value), **flags)
    built = make_plan(request)
    report_plan(built)
    if not built.valid:
        raise typer.Exit(2)
