"""The plan/build flags, declared once. ``lmi-build plan`` and the build commands
(``lmi-build trtllm|neuronx|hf``) take the same flags and turn them into a ``PlanRequest`` with
``plan_request``, so help text, spelling and meaning never drift apart."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from lmi_build.cli.option_flags import HELP, MAXIMUM, MINIMUM

if TYPE_CHECKING:  # the planner's pydantic models load only when a command runs, not for --help
    from lmi_build.planning.request import PlanRequest
    from lmi_build.planning.saved import SavedPlan
    from lmi_build.types import TargetName

MODEL_PANEL = "Model"
KNOBS_PANEL = "Build knobs"
INPUTS_PANEL = "LMI inputs"

ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m", rich_help_panel=MODEL_PANEL,
    help="Local directory, Hugging Face id (org/name[@rev]), s3://bucket/prefix or demo:NAME. "
    "Default: option.model_id / HF_MODEL_ID.")]
RevisionOpt = Annotated[str | None, typer.Option(
    "--revision", rich_help_panel=MODEL_PANEL, help=HELP["--revision"])]
TrustRemoteCodeOpt = Annotated[bool, typer.Option(
    "--trust-remote-code", rich_help_panel=MODEL_PANEL, help=HELP["--trust-remote-code"])]
AllowPickleOpt = Annotated[bool, typer.Option(
    "--allow-pickle", rich_help_panel=MODEL_PANEL,
    help="Accept pickle (*.bin) weights when no safetensors exist (pickle can run code).")]

# The flags that set an option take their help and bounds from its table entry (option_flags.py
# is generated from the option table and PlanRequest's FLAG_KEYS).
TpOpt = Annotated[str | None, typer.Option(
    "--tp", rich_help_panel=KNOBS_PANEL, help=HELP["--tp"])]
PpOpt = Annotated[int | None, typer.Option(
    "--pp", min=MINIMUM.get("--pp"), max=MAXIMUM.get("--pp"), rich_help_panel=KNOBS_PANEL, help=HELP["--pp"])]
DtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", rich_help_panel=KNOBS_PANEL, help=HELP["--dtype"])]
QuantizeOpt = Annotated[str | None, typer.Option(
    "--quantize", rich_help_panel=KNOBS_PANEL, help=HELP["--quantize"])]
MaxInputLenOpt = Annotated[int | None, typer.Option(
    "--max-input-len", min=MINIMUM.get("--max-input-len"), max=MAXIMUM.get("--max-input-len"),
    rich_help_panel=KNOBS_PANEL, help=HELP["--max-input-len"])]
MaxOutputLenOpt = Annotated[int | None, typer.Option(
    "--max-output-len", min=MINIMUM.get("--max-output-len"), max=MAXIMUM.get("--max-output-len"),
    rich_help_panel=KNOBS_PANEL, help=HELP["--max-output-len"])]
MaxBatchSizeOpt = Annotated[int | None, typer.Option(
    "--max-batch-size", min=MINIMUM.get("--max-batch-size"), max=MAXIMUM.get("--max-batch-size"),
    rich_help_panel=KNOBS_PANEL, help=HELP["--max-batch-size"])]
NPositionsOpt = Annotated[int | None, typer.Option(
    "--n-positions", min=MINIMUM.get("--n-positions"), max=MAXIMUM.get("--n-positions"),
    rich_help_panel=KNOBS_PANEL, help=HELP["--n-positions"])]
ContextLengthEstimateOpt = Annotated[str | None, typer.Option(
    "--context-length-estimate", rich_help_panel=KNOBS_PANEL, help=HELP["--context-length-estimate"])]
InstanceTypeOpt = Annotated[str | None, typer.Option(
    "--instance-type", rich_help_panel=KNOBS_PANEL,
    help="Serving instance (e.g. g5.12xlarge, inf2.24xlarge): resolves tp=max, checks memory fit.")]
GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", rich_help_panel=KNOBS_PANEL,
    help="trtllm: the serving GPU (a10g, a100, l4, h100, or an SM such as sm90): FP8 needs sm89+.")]
ProfileOpt = Annotated[str | None, typer.Option(
    "--profile", rich_help_panel=KNOBS_PANEL,
    help="Container profile (`lmi-build profiles list`). Default: trtllm the newest engine-capable one, "
    "neuronx the newest published Neuron image; hf: none (ModelOpt's format, for TensorRT-LLM's PyTorch "
    "backend), or a vLLM/LMI-Dist container, whose engine gets the format it loads (AWQ, GPTQ).")]
CalibDataOpt = Annotated[Path | None, typer.Option(
    "--calib-data", rich_help_panel=KNOBS_PANEL,
    help="Calibration text file (one sample per line or JSONL) instead of the built-in set.")]

OptionOpt = Annotated[list[str] | None, typer.Option(
    "--option", "-o", rich_help_panel=INPUTS_PANEL,
    help="Any serving.properties key=value (repeatable): -o option.tokens_per_block=64.")]
PropertiesOpt = Annotated[Path | None, typer.Option(
    "--properties", rich_help_panel=INPUTS_PANEL,
    help="A serving.properties file, read as the container reads it.")]
StrictOpt = Annotated[bool, typer.Option(
    "--strict", rich_help_panel=INPUTS_PANEL, help="Unknown or deprecated options are errors, not warnings.")]

PlanFileOpt = Annotated[Path | None, typer.Option(
    "--plan", rich_help_panel=INPUTS_PANEL,
    help="Build exactly this saved plan (`lmi-build plan ... --save plan.json`). No other build knob may be "
    "given; --model and --calib-data only say where the planned model and file are now (both are checked).")]
SaveOpt = Annotated[Path | None, typer.Option(
    "--save", rich_help_panel=INPUTS_PANEL,
    help="Write the full plan to this file, for `lmi-build <target> --plan FILE` (here or on another host).")]


@dataclass(frozen=True)
class PlanFlags:
    """The build-shaping flags of one command line, as given (``None``/``False``: not given)."""

    model: str | None = None
    revision: str | None = None
    tp: str | None = None
    pp: int | None = None
    dtype: str | None = None
    quantize: str | None = None
    max_input_len: int | None = None
    max_output_len: int | None = None
    max_batch_size: int | None = None
    n_positions: int | None = None
    context_length_estimate: str | None = None
    trust_remote_code: bool = False
    option: list[str] | None = None
    properties: Path | None = None
    instance_type: str | None = None
    profile: str | None = None
    strict: bool = False
    calib_data: Path | None = None
    allow_pickle: bool = False
    endpoint_url: str | None = None
    gpu: str | None = None

    def request(self, target: TargetName, env: Mapping[str, str] | None = None) -> PlanRequest:
        """The planner's input from these flags (``env`` defaults to this process's environment)."""
        from lmi_build.planning.request import PlanRequest

        given = {f.name: getattr(self, f.name) for f in fields(self)}
        given.update(n_positions=str(self.n_positions) if self.n_positions is not None else None,
                     option=tuple(self.option or ()))
        return PlanRequest(target=target, env=dict(os.environ if env is None else env), **given)

    def given(self) -> list[str]:
        """The flags given on the command line, spelled as the user typed them."""
        return [_FLAG_NAMES.get(f.name, "--" + f.name.replace("_", "-")) for f in fields(self)
                if getattr(self, f.name) not in (None, False, [], ())]


# Flags whose spelling is not "--" + the parameter name with dashes.
_FLAG_NAMES = {"option": "--option"}
# With --plan these only say where the planned inputs are now; the plan's digests decide.
LOCATION_FLAGS = frozenset({"--model", "--calib-data", "--endpoint-url"})


def load_plan_for(target: TargetName, plan_file: Path, flags: PlanFlags) -> SavedPlan:
    """The saved plan ``--plan`` names, for ``target``, refusing any flag that would shape the build."""
    from lmi_build.errors import OptionError
    from lmi_build.planning.saved import load_saved_plan

    shaping = [flag for flag in flags.given() if flag not in LOCATION_FLAGS]
    if shaping:
        raise OptionError(f"{', '.join(shaping)} cannot be combined with --plan: the saved plan fixes every build knob",
                          hint="drop them, or plan again with them: lmi-build plan ... --save plan.json")
    saved = load_saved_plan(plan_file)
    if saved.plan.target != target:
        raise OptionError(f"{plan_file} is a plan for the {saved.plan.target} target, not {target}",
                          hint=f"run it with `lmi-build {saved.plan.target} --plan {plan_file}`")
    return saved.with_inputs(model=flags.model, calib_data=flags.calib_data.absolute() if flags.calib_data else None)
