"""What a caller asks the planner for, declared once: every build knob is one field here or in its target.

Each field of ``PlanRequest`` (the knobs every target takes) and of a target's ``TargetRequest``
(``targets/<name>/knobs.py``: the knobs only it takes) is the single declaration of a knob: its type and
default, the flag that sets it, the serving.properties key it stands for (whose help text, bounds and
default come from the option table, ``lmi_build/data/options.toml``) and its help panel. From these
fields come the flags of ``lmi-build plan`` and of each build command (``lmi_build.cli.plan_flags``), the
keys of a matrix build (``lmi_build.fleet.matrix``) and the flag -> option mapping the planner applies
(``flag_options``), as vLLM's ``EngineArgs`` fields make its parser.

No pydantic and no option table here: the CLI reads these declarations when it starts.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

MODEL_PANEL = "Model"
KNOBS_PANEL = "Build knobs"
INPUTS_PANEL = "LMI inputs"


@dataclass(frozen=True)
class Knob:
    """How a knob (a field of ``PlanRequest`` or of a target's ``TargetRequest``) is given on a command line."""

    flag: str  # "--max-input-len"
    panel: str  # the --help panel it is listed in
    option: str | None = None  # the LMI key it sets: help, bounds and default from its option table entry
    help: str | None = None  # for a knob that sets no option (the table has no text for it)
    short: str | None = None  # "-m"
    location: bool = False  # with --plan it only says where a planned input is now (the plan's digests decide)
    metavar: str | None = None
    # A target's knob is listed in --help right after this flag (else at the end of its panel).
    follows: str | None = None
    # Only the build commands of targets that read the weights on this host take it
    # (``TargetRequest.weight_inputs``); `plan` takes it for every target.
    weight_input: bool = False


def knob(default: Any = None, **how: Any) -> Any:
    """A ``PlanRequest`` or ``TargetRequest`` field that is a knob (``how``: the ``Knob`` fields)."""
    return field(default=default, metadata={"knob": Knob(**how)})


@dataclass(frozen=True)
class TargetRequest:
    """The knobs one target declares for itself (``targets/<name>/knobs.py``), beside ``PlanRequest``'s
    common ones: its build command and `plan <target>` take them as flags, a matrix build as keys."""

    # Whether its build command takes --allow-pickle and --calib-data: its build reads the weights on
    # this host (converts, quantizes, calibrates).
    weight_inputs: ClassVar[bool] = True


Requested = TypeVar("Requested", bound=TargetRequest)


@dataclass(frozen=True)
class PipelineAndLengthsRequest(TargetRequest):
    """The knobs of a target whose build fixes a pipeline split and the sequence lengths: declared once
    here, taken by each target whose ``TargetRequest`` derives from this one."""

    pp: int | None = knob(flag="--pp", option="option.pipeline_parallel_degree", panel=KNOBS_PANEL, follows="--tp")
    max_input_len: int | None = knob(flag="--max-input-len", option="option.max_input_len", panel=KNOBS_PANEL,
                                     follows="--quantize")
    max_output_len: int | None = knob(flag="--max-output-len", option="option.max_output_len", panel=KNOBS_PANEL,
                                      follows="--max-input-len")


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
    dtype: str | None = knob(flag="--dtype", option="option.dtype", panel=KNOBS_PANEL)
    quantize: str | None = knob(flag="--quantize", option="option.quantize", panel=KNOBS_PANEL)
    max_batch_size: int | None = knob(flag="--max-batch-size", option="option.max_rolling_batch_size",
                                      panel=KNOBS_PANEL)
    trust_remote_code: bool = knob(False, flag="--trust-remote-code", option="option.trust_remote_code",
                                   panel=MODEL_PANEL)
    allow_pickle: bool = knob(
        False, flag="--allow-pickle", panel=MODEL_PANEL, weight_input=True,
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
    profile: str | None = knob(
        flag="--profile", panel=KNOBS_PANEL,
        help="Container profile (`lmi-build profiles list`). Default: trtllm the newest engine-capable one, neuronx "
             "the newest published Neuron image; hf: none (the format the newest vLLM/LMI-Dist profile loads; the plan "
             "names every profile that loads it), or a vLLM/LMI-Dist container, whose engine gets the format it loads.")
    strict: bool = knob(False, flag="--strict", panel=INPUTS_PANEL,
                        help="Unknown or deprecated options are errors, not warnings.")
    calib_data: Path | None = knob(
        flag="--calib-data", panel=KNOBS_PANEL, location=True, weight_input=True,
        help="Calibration text file (one sample per line or JSONL) instead of the built-in set.")
    # The target's own knobs (its ``TargetRequest``), and other targets' knobs given to `plan` (or a matrix
    # build): those that set an option pass through as options (the planner warns they are not this
    # target's), serving.properties key -> (value, flag).
    target_knobs: TargetRequest | None = None  # None: none given (each its default)
    foreign_options: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # Not knobs: where an s3:// model is served from (a property of the host, given by the command's
    # --endpoint-url) and the environment the container would read (OPTION_*, HF_MODEL_ID, ...).
    endpoint_url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def flag_options(self) -> dict[str, tuple[str, str]]:
        """The knobs that set an option, as given: serving.properties key -> (value, flag)."""
        own = _flag_options(self.target_knobs) if self.target_knobs is not None else {}
        return {**self.foreign_options, **_flag_options(self), **own}

    def own(self, kind: type[Requested]) -> Requested:
        """The target's own knobs as its type (a target narrows them to its own, as ``BuildPlan.knobs``)."""
        if self.target_knobs is None:
            return kind()
        if not isinstance(self.target_knobs, kind):
            raise TypeError(f"the request carries {type(self.target_knobs).__name__}, not {kind.__name__}")
        return self.target_knobs


def _flag_options(request: object) -> dict[str, tuple[str, str]]:
    given: dict[str, tuple[str, str]] = {}
    for declared, how in knob_fields(type(request)):
        value = getattr(request, declared.name)
        if how.option is None or value is None or value is False:  # a switch is only ever on
            continue
        given[how.option] = ("true" if value is True else str(value), how.flag)
    return given


def knob_fields(kind: type[Any] = PlanRequest) -> Iterator[tuple[Field[Any], Knob]]:
    """Every knob of ``kind`` (``PlanRequest``, or a target's ``TargetRequest``) with its declaration, in
    declaration order."""
    for declared in fields(kind):
        how = declared.metadata.get("knob")
        if isinstance(how, Knob):
            yield declared, how


def ordered_knobs(kinds: Iterable[type[TargetRequest]]) -> list[tuple[Field[Any], Knob]]:
    """``PlanRequest``'s knobs with those of the target requests ``kinds``, each once (`plan` takes every
    target's), a target's knob right after the flag it ``follows``: the order --help lists them in. Two
    targets declaring one knob differently is a TypeError."""
    ordered = list(knob_fields())
    for kind in kinds:
        for declared, how in knob_fields(kind):
            same = next((known for known in ordered if known[0].name == declared.name), None)
            if same is not None:
                if same[1] != how:
                    raise TypeError(f"{kind.__name__}.{declared.name} is declared otherwise by another target")
                continue
            after = [index for index, (_, known) in enumerate(ordered) if known.flag == how.follows]
            ordered.insert(after[0] + 1 if after else len(ordered), (declared, how))
    return ordered


def request_for(own: type[TargetRequest], others: Iterable[type[TargetRequest]], values: Mapping[str, Any],
                **not_knobs: Any) -> PlanRequest:
    """The request of a build for the target whose knobs are ``own``, from knob values by field name (a
    command line's, a matrix build's): the common ones, the target's own, and ``others``' (other targets'
    knobs `plan` takes too: those that set an option pass through as options, the planner warns they are
    not this target's; the others are not this target's business). A name no one declares is a TypeError."""
    common = {declared.name for declared, _ in knob_fields()}
    mine = {declared.name for declared, _ in knob_fields(own)}
    theirs: set[str] = set()
    foreign: dict[str, tuple[str, str]] = {}
    for kind in others:
        for declared, how in knob_fields(kind):
            theirs.add(declared.name)
            value = values.get(declared.name)
            if declared.name not in mine and how.option is not None and value is not None and value is not False:
                foreign[how.option] = ("true" if value is True else str(value), how.flag)
    unknown = set(values) - common - mine - theirs
    if unknown:
        raise TypeError(f"unknown knobs: {', '.join(sorted(unknown))}")
    return PlanRequest(**{name: value for name, value in values.items() if name in common},
                       target_knobs=own(**{name: value for name, value in values.items() if name in mine}),
                       foreign_options=foreign, **not_knobs)
