"""``lmi-build plan``: resolve and validate a build without running it."""

from enum import Enum
from typing import Any

import typer

from lmi_build.cli.app import EndpointOpt
from lmi_build.cli.plan_flags import SaveOpt, plan_request_from, with_knobs
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.planner.make import plan_request
from lmi_build.planning.render import report_plan
from lmi_build.reporting.output import current
from lmi_build.targets import get_target

# One line: typer keeps a line break of a command's help in the list of commands.
HELP = ("Resolve every build knob, validate it against the model, estimate memory and compute the cache key, "
        "without reading weights or building anything.")

EPILOG = """[bold]Examples[/bold]

  lmi-build plan trtllm --model meta-llama/Llama-2-7b-hf --tp 2 \\
      --quantize awq --instance-type g5.12xlarge

  lmi-build plan neuronx --model ./llama-2-7b --tp 8 --n-positions 4096 \\
      --max-batch-size 4 --json

  lmi-build plan hf --model demo:tiny-llama \\
      --properties serving.properties -o option.dtype=bf16

Exit status: 0 valid plan, 2 invalid plan (the plan is still printed), 1 other errors."""


PlanTarget = Enum("PlanTarget", {name: name for name in TARGET_NAMES}, type=str)  # type: ignore[misc]


def register(app: typer.Typer) -> None:
    app.command("plan", help=HELP, epilog=EPILOG)(with_knobs(plan, command=None))


def plan(
    target: PlanTarget = typer.Argument(..., help="What to build: trtllm engines, neuronx NEFFs, or an hf checkpoint."),
    endpoint_url: EndpointOpt = None,
    save: SaveOpt = None,
    **knobs: Any,
) -> None:
    """``lmi-build plan``: its help is HELP."""
    saved = plan_request(plan_request_from(knobs, target=target.value, endpoint_url=endpoint_url), get_target(target.value))
    report_plan(saved.plan)
    if save is not None:
        saved.save(save)  # an invalid plan is saved too (for review); builds refuse it
        current().info(f"plan saved to {save}")
    if not saved.plan.valid:
        raise typer.Exit(2)
