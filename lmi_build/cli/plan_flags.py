"""The plan/build flags, generated from their one declaration (``PlanRequest``'s fields).

``lmi-build plan`` takes every knob; each build command (``lmi-build trtllm|neuronx|hf``) takes the
knobs declared for it. A command function declares only its own parameters and ``**knobs``;
``with_knobs`` adds a typer option per knob, whose name, type, help text and bounds come from the
field and from the option table entry of the LMI key it sets (``flag_help``). The
values come back as ``knobs`` and become a ``PlanRequest`` with ``plan_request_from``, so a knob is
spelled once and help, spelling, bounds and meaning never drift apart.
"""

import contextlib
import functools
import inspect
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import Field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from lmi_build.cli.app import click_context
from lmi_build.cli.flag_help import CHOICES, COMMAND_HELP, HELP, MAXIMUM, MINIMUM, TARGET_CHOICES
from lmi_build.cli.user_config import profile_default
from lmi_build.core.errors import OptionError, UnknownName
from lmi_build.options.spec import exact_spec
from lmi_build.planner.recheck import recheck_saved_plan
from lmi_build.planning.request import INPUTS_PANEL, Knob, PlanRequest, ordered_knobs
from lmi_build.reporting.output import current
from lmi_build.targets import TARGETS, every_knob, get_target, load_saved_plan, request_for

if TYPE_CHECKING:  # the planner's pydantic models load only when a command runs, not for --help
    from lmi_build.planning.saved import SavedPlan

PlanFileOpt = Annotated[Path | None, typer.Option(
    "--plan", rich_help_panel=INPUTS_PANEL,
    help="Build exactly this saved plan (`lmi-build plan ... --save plan.json`). No other build knob may be "
    "given; --model and --calib-data only say where the planned model and file are now (both are checked).")]
SaveOpt = Annotated[Path | None, typer.Option(
    "--save", rich_help_panel=INPUTS_PANEL,
    help="Write the full plan to this file, for `lmi-build <target> --plan FILE` (here or on another host).")]


def _option(how: Knob, command: str | None) -> Any:
    """The typer option of one knob: its help and bounds from the option it sets, else its own; a
    flag whose values differ by target lists ``command``'s (`plan`, None: each target's)."""
    if how.option is not None and how.option not in HELP:
        raise KeyError(f"{how.flag} sets {how.option}, which flag_help.HELP has no help for")
    help_text = how.help if how.option is None else COMMAND_HELP.get(how.option, {}).get(command or "plan",
                                                                                         HELP[how.option])
    key = how.option or ""
    names = [how.flag, how.short] if how.short else [how.flag]
    return typer.Option(*names, rich_help_panel=how.panel, help=help_text, metavar=how.metavar,
                        min=MINIMUM.get(key), max=MAXIMUM.get(key))


def _cli_type(declared: Any, how: Knob) -> Any:
    """The command-line type of a field: a repeatable option is a list, a flag narrower than its
    option one of its values (``CHOICES``: --dtype takes what the build makes), anything else as
    declared."""
    if typing.get_origin(declared) is tuple:
        return list[str] | None
    if how.option in CHOICES:
        return Literal[tuple(CHOICES[how.option])] | None
    return declared


def command_knobs(command: str | None) -> list[tuple[Field[Any], Knob]]:
    """The knobs ``command`` takes (a target's name: its build command; None: `plan`, which takes them all),
    in --help order."""
    if command is None:
        return every_knob()
    own = get_target(command).request_knobs
    return [(declared, how) for declared, how in ordered_knobs([own]) if own.weight_inputs or not how.weight_input]


def knob_parameters(command: str | None) -> list[inspect.Parameter]:
    """The typer parameters of the knobs ``command`` takes (None: `plan`, which takes them all)."""
    hints = typing.get_type_hints(PlanRequest)
    for target in TARGETS.values():
        hints.update(typing.get_type_hints(target.request_knobs))
    parameters = []
    for declared, how in command_knobs(command):
        default = False if hints[declared.name] is bool else None
        parameters.append(inspect.Parameter(declared.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=Annotated[_cli_type(hints[declared.name], how), _option(how, command)]))
    return parameters


def with_knobs(function: Callable[..., Any], command: str | None) -> Callable[..., Any]:
    """``function`` (its own parameters, then ``**knobs``) with the knob flags of ``command`` added; the
    knob values reach it through ``**knobs``."""
    signature = inspect.signature(function, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    parameters = [*own, *knob_parameters(command)]

    @functools.wraps(function)
    def run(**values: Any) -> Any:
        return function(**values)

    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run


def plan_request_from(knobs: Mapping[str, Any], *, target: str, endpoint_url: str | None = None,
                      env: Mapping[str, str] | None = None) -> PlanRequest:
    """The planner's input from a command line's knob values (``env``: this process's environment);
    a profile not given comes from the config file's standing defaults, if it names one."""
    check_flag_values(knobs, target)
    env = os.environ if env is None else env
    values: dict[str, Any] = {name: tuple(value) if isinstance(value, list) else value
                              for name, value in knobs.items() if value is not None}
    _check_profile_kind(target, values.get("profile"))
    profile, config_file = profile_default(target, values.get("profile"), env)
    if config_file is not None:
        _check_configured_profile(target, profile, config_file)
        values["profile"] = profile

        current().info(f"profile {profile} from {config_file} ([{target}] profile; --profile overrides it)")
    return request_for(target, values, endpoint_url=endpoint_url, env=dict(env))


def check_flag_values(knobs: Mapping[str, Any], target: str) -> None:
    """A flag's value that its option cannot take (``--tp two``, ``--context-length-estimate abc``), or
    that ``target`` does not build (``--quantize bitsandbytes`` for trtllm), is a usage error: one line
    with the values it takes, before anything is planned or printed (issue 30 item 4). The option
    table's parser decides, as it does for the same value from serving.properties (a plan error there).
    typer has checked the flags it types itself (integers and their bounds, --dtype's choices)."""
    for declared, how in every_knob():
        value = knobs.get(declared.name)
        if how.option is None or value is None or isinstance(value, (bool, list, tuple, Path)):
            continue
        accepted = TARGET_CHOICES.get(how.option, {}).get(target)
        if accepted is not None:
            if value not in accepted:
                raise _usage_error(how.flag, f"{str(value)!r}: {target} builds one of: {', '.join(accepted) or 'none'}")
            continue
        spec = exact_spec(how.option)
        problem = spec.read(str(value))[1] if spec is not None else None
        if problem is not None:
            raise _usage_error(how.flag, f"{str(value)!r}: {problem}")


def _usage_error(flag: str, message: str) -> Exception:
    """click's error for a bad value of ``flag``, as typer raises it for the flags it types: main()
    prints it as one line (``error: Invalid value for '--tp': ...``) and exits 1."""
    return typer.BadParameter(message, ctx=click_context(), param_hint=f"'{flag}'")


def _check_profile_kind(target: str, profile: str | None) -> None:
    """``--profile`` naming another target's container (`plan trtllm --profile lmi-0.33.0-neuronx-...`)
    says so and lists this target's profiles; `unknown container profile` was untrue, as `profiles list`
    shows it (issue 30 item 6). A name no target knows is left to the target's own message."""
    own = TARGETS[target].container_profiles()
    if profile is None or profile in own:
        return
    for other, candidate in TARGETS.items():
        if other != target and profile in candidate.container_profiles():
            raise OptionError(f"--profile {profile} is a {other} container profile, not one of {target}'s",
                              hint=f"{target}'s profiles: {', '.join(own) or 'none'}; or build for {other} with it")


def _check_configured_profile(target: str, profile: str | None, config_file: Path) -> None:
    known = get_target(target).container_profiles()
    if profile not in known:
        with contextlib.suppress(UnknownName):  # a release without a container says what to use instead (Neuron)
            get_target(target).toolchain(profile)
        raise OptionError(f"{config_file}: [{target}] profile = {profile!r} is not a {target} profile",
                          hint=f"fix the file; `lmi-build profiles list` names them (e.g. {next(iter(known), '')})")


def given_flags(knobs: Mapping[str, Any]) -> list[tuple[str, Knob]]:
    """The knobs given on the command line (a switch only when on), with their declarations."""
    return [(how.flag, how) for declared, how in every_knob()
            if knobs.get(declared.name) not in (None, False, [], ())]


def load_plan_for(target: str, plan_file: Path, knobs: Mapping[str, Any], *,
                  endpoint_url: str | None = None) -> "SavedPlan[Any]":
    """The saved plan ``--plan`` names, for ``target``, refusing any knob that would shape the build,
    and refusing a plan that is not the plan its own inputs make now (``planner.recheck_saved_plan``)."""
    shaping = [flag for flag, how in given_flags(knobs) if not how.location]
    if shaping:
        raise OptionError(f"{', '.join(shaping)} cannot be combined with --plan: the saved plan fixes every build knob",
                          hint="drop them, or plan again with them: lmi-build plan ... --save plan.json")
    saved = load_saved_plan(plan_file)
    if saved.plan.target != target:
        raise OptionError(f"{plan_file} is a plan for the {saved.plan.target} target, not {target}",
                          hint=f"run it with `lmi-build {saved.plan.target} --plan {plan_file}`")
    calib = knobs.get("calib_data")
    saved = saved.with_inputs(model=knobs.get("model"), calib_data=calib.absolute() if calib else None)
    if saved.plan.valid:  # an invalid plan is refused with its own errors
        recheck_saved_plan(saved, get_target(target), origin=f"plan file {plan_file}", endpoint_url=endpoint_url)
    return saved
