"""What a caller asks the planner for, declared once: every build knob is one field here.

Each field of ``PlanRequest`` is the single declaration of a knob: its type and default, the flag that
sets it, the serving.properties key it stands for (whose help text, bounds and default come from the
option table, ``lmi_build/data/options.toml``), its help panel and the build commands that take it.
From these fields come the flags of ``lmi-build plan`` and of each build command
(``lmi_build.cli.plan_flags``), the keys of a matrix build (``lmi_build.fleet.matrix``), the
flag -> option mapping the planner applies (``flag_options``) and the flag reference
(``python -m lmi_build.cli.flag_help``), as vLLM's ``EngineArgs`` fields make its parser.

No pydantic and no option table here: the CLI reads these declarations when it starts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

MODEL_PANEL = "Model"
KNOBS_PANEL = "Build knobs"
INPUTS_PANEL = "LMI inputs"
EVERY_COMMAND = ("trtllm", "neuronx", "hf")


@dataclass(frozen=True)
class Knob:
    """How a ``PlanRequest`` field is given on a command line."""

    flag: str  # "--max-input-len"
    panel: str  # the --help panel it is listed in
    option: str | None = None  # the LMI key it sets: help, bounds and default from its option table entry
    help: str | None = None  # for a knob that sets no option (the table has no text for it)
    short: str | None = None  # "-m"
    commands: tuple[str, ...] = EVERY_COMMAND  # the build commands that take it (`plan` takes every knob)
    location: bool = False  # with --plan it only says where a planned input is now (the plan's digests decide)
    metavar: str | None = None


def knob(default: Any = None, **how: Any) -> Any:
    """A ``PlanRequest`` field that is a knob (``how``: the ``Knob`` fields)."""
    return field(default=default, metadata={"knob": Knob(**how)})


@dataclass(frozen=True)
class PlanRequest:
    """Inputs of ``planner.plan_request``. ``None`` means "not given here": the value then comes from the
    properties file, the environment, the recipe or the LMI default, in that order."""

    model: str | None = knob(
        flag="--model", short="-m", panel=MODEL_PANEL, location=True,
        help="Local directory, Hugging Face id (org/name\\[@rev]), s3://bucket/prefix or demo:NAME (lmi-build demo "
             "list). Default: option.model_id / HF_MODEL_ID.")
    revision: str | None = knob(flag="--revision", option="option.revision", panel=MODEL_PANEL)
    tp: str | None = knob(flag="--tp", option="option.tensor_parallel_degree", panel=KNOBS_PANEL)  # an int, or "max"
    pp: int | None = knob(flag="--pp", option="option.pipeline_parallel_degree", panel=KNOBS_PANEL,
                          commands=("trtllm", "hf"))
    dtype: str | None = knob(flag="--dtype", option="option.dtype", panel=KNOBS_PANEL)
    quantize: str | None = knob(flag="--quantize", option="option.quantize", panel=KNOBS_PANEL)
    max_input_len: int | None = knob(flag="--max-input-len", option="option.max_input_len", panel=KNOBS_PANEL,
                                     commands=("trtllm", "hf"))
    max_output_len: int | None = knob(flag="--max-output-len", option="option.max_output_len", panel=KNOBS_PANEL,
                                      commands=("trtllm", "hf"))
    max_batch_size: int | None = knob(flag="--max-batch-size", option="option.max_rolling_batch_size",
                                      panel=KNOBS_PANEL)
    n_positions: int | None = knob(flag="--n-positions", option="option.n_positions", panel=KNOBS_PANEL,
                                   commands=("neuronx",))
    context_length_estimate: str | None = knob(flag="--context-length-estimate",
                                               option="option.context_length_estimate", panel=KNOBS_PANEL,
                                               commands=("neuronx",))  # "256,512"
    trust_remote_code: bool = knob(False, flag="--trust-remote-code", option="option.trust_remote_code",
                                   panel=MODEL_PANEL)
    allow_pickle: bool = knob(
        False, flag="--allow-pickle", panel=MODEL_PANEL, commands=("trtllm", "hf"),
        help="Accept pickle (*.bin) weights when no safetensors exist (pickle can run code).")
    option: tuple[str, ...] = knob(
        (), flag="--option", short="-o", panel=INPUTS_PANEL, metavar="KEY=VALUE",
        help="Any serving.properties key=value (repeatable): -o option.tokens_per_block=64.")
    properties: Path | None = knob(flag="--properties", panel=INPUTS_PANEL,
                                   help="A serving.properties file, read as the container reads it.")
    instance_type: str | None = knob(
        flag="--instance-type", panel=KNOBS_PANEL,
        help="Serving instance (e.g. g5.12xlarge, ml.g5.12xlarge, inf2.24xlarge): resolves tp=max, checks memory "
             "fit.")
    gpu: str | None = knob(
        flag="--gpu", panel=KNOBS_PANEL, commands=("trtllm",),
        help="trtllm: the serving GPU (a10g, a100, l4, h100, or an SM such as sm90): FP8 needs sm89+.")
    profile: str | None = knob(
        flag="--profile", panel=KNOBS_PANEL,
        help="Container profile (`lmi-build profiles list`). Default: trtllm the newest engine-capable one, neuronx "
             "the newest published Neuron image; hf: none (the format the newest vLLM/LMI-Dist profile loads; the plan "
             "names every profile that loads it), or a vLLM/LMI-Dist container, whose engine gets the format it loads.")
    strict: bool = knob(False, flag="--strict", panel=INPUTS_PANEL,
                        help="Unknown or deprecated options are errors, not warnings.")
    calib_data: Path | None = knob(
        flag="--calib-data", panel=KNOBS_PANEL, commands=("trtllm", "hf"), location=True,
        help="Calibration text file (one sample per line or JSONL) instead of the built-in set.")
    # Not knobs: where an s3:// model is served from (a property of the host, given by the command's
    # --endpoint-url) and the environment the container would read (OPTION_*, HF_MODEL_ID, ...).
    endpoint_url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def flag_options(self) -> dict[str, tuple[str, str]]:
        """The knobs that set an option, as given: serving.properties key -> (value, flag)."""
        given: dict[str, tuple[str, str]] = {}
        for declared, how in knob_fields():
            value = getattr(self, declared.name)
            if how.option is None or value is None or value is False:  # a switch is only ever on
                continue
            given[how.option] = ("true" if value is True else str(value), how.flag)
        return given


def knob_fields() -> Iterator[tuple[Field[Any], Knob]]:
    """Every knob of ``PlanRequest`` with its declaration, in declaration order."""
    for declared in fields(PlanRequest):
        how = declared.metadata.get("knob")
        if isinstance(how, Knob):
            yield declared, how


# The fields a caller sets to shape a plan (the build commands' flags, a matrix build's keys).
PLAN_KNOBS: tuple[str, ...] = tuple(declared.name for declared, _ in knob_fields())
# Which flag sets which LMI option (the flag help generator and its drift test read it).
FLAG_KEYS: dict[str, str] = {how.flag: how.option for _, how in knob_fields() if how.option is not None}
