"""``lmi-build config show`` and ``lmi-build config options``: resolved options and the table."""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from lmi_build.cli.app import new_app
from lmi_build.cli.user_config import StandingDefaults, load_standing_defaults, profile_default
from lmi_build.core.errors import LmiBuildError, OptionError
from lmi_build.core.redaction import redact, secret_values
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.core.types import PlanMessage
from lmi_build.options.resolve import OptionInputs, OptionResolution, cli_option_pairs, resolve_options
from lmi_build.options.spec import all_option_specs, exact_spec
from lmi_build.planner.make import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.request import PlanRequest
from lmi_build.reporting.output import current, identifier
from lmi_build.targets import get_target

config_app = new_app(help="Show how LMI options resolve, and the option reference.")

_SHOW_EPILOG = """Examples:

  lmi-build config show --target trtllm --properties serving.properties \\
      --option max_input_len=2048

  lmi-build config show --target trtllm --model demo:tiny-llama \\
      --properties serving.properties

  OPTION_TENSOR_PARALLEL_DEGREE=4 lmi-build config show --json | jq .options

Precedence (first wins): --option > --properties file > environment > engine alias > recipe > table default;
with --model the plan then derives what the profile and the model decide (source "derived"), as `plan` does.

Exit status 2 when a value is invalid (or, with --strict, on any warning)."""

_OPTIONS_EPILOG = """Examples:

  lmi-build config options --target neuronx

  lmi-build config options --json \\
      | jq '.[] | select(.build_relevant == true) | .key'"""


def _check_target(target: str) -> str:
    if target not in TARGET_NAMES:
        raise OptionError(f"unknown target {target!r}", hint=f"use --target {' or '.join(TARGET_NAMES)}")
    return target


@config_app.command("show", epilog=_SHOW_EPILOG)
def show(
    target: Annotated[str, typer.Option(
        "--target", "-t", help=f"Build target: {', '.join(TARGET_NAMES[:-1])} or {TARGET_NAMES[-1]}.")] = TARGET_NAMES[0],
    properties: Annotated[
        Path | None, typer.Option("--properties", "-p", help="A serving.properties file.", dir_okay=False)
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="key=value, repeatable (wins over everything).")
    ] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Resolve through the plan for this model (as `lmi-build plan` does): the values "
                              "serving.properties gets. demo:NAME works offline.")] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", help="Container profile for the plan (`lmi-build profiles list`); default: the target's.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Treat every warning as an error.")] = False,
    no_env: Annotated[bool, typer.Option("--no-env", help="Ignore OPTION_*/HF_*/SM_* variables.")] = False,
) -> None:
    """Print every resolved option with its value and where it came from. With --model, the values
    are the plan's (the profile's and the model's derivations included); without, the option layers
    alone, and the keys the plan would change are named."""
    env: dict[str, str] = {} if no_env else dict(os.environ)
    standing = load_standing_defaults()
    profile, _ = profile_default(_check_target(target), profile)
    inputs = OptionInputs(cli=cli_option_pairs(option or []), properties_file=properties, env=env)
    resolution = resolve_options(inputs, target=_check_target(target), strict=strict)
    request = PlanRequest(model=DIFF_MODEL if model is None else model, properties=properties,
                          option=tuple(option or []), profile=profile, env=env, strict=strict)
    if model is None:
        shown = _layers_beside_plan(target, resolution, request, secret_values(env))
    else:
        shown = _planned(target, resolution, plan_request(request, get_target(target)).plan, secret_values(env))
    out = current()
    out.result(_show_json(target, shown, standing), _options_table(shown.rows) if out.human else None)
    if out.human:
        _say_what_differs(shown)
    if out.human and standing.values:
        shown_values = ", ".join(f"{key}={value}" for key, value in standing.values.items())
        out.info(f"standing defaults from {standing.path}: {shown_values} (a flag or the environment overrides each)")
    for warning in shown.warnings:
        out.warn(_line(warning.message, warning.hint))
    for problem in shown.errors:
        out.error(_line(problem.message, problem.hint))
    if shown.errors:
        raise typer.Exit(2)


# The model `config show` plans for when none is given, to name what the plan changes (offline).
DIFF_MODEL = "demo:tiny-llama"


@dataclass(frozen=True)
class _Shown:
    """What `config show` prints: the rows, the plan they came from or are compared with (None when
    none could be made), the keys that plan writes otherwise (None with --model), and the messages."""

    rows: dict[str, dict[str, Any]]
    plan: BuildPlan[Any] | None
    differs: dict[str, dict[str, str | None]] | None
    warnings: list[PlanMessage]
    errors: list[PlanMessage]


def _planned(target: str, resolution: OptionResolution, plan: BuildPlan[Any], secrets: list[str]) -> _Shown:
    """With --model: the plan's values, each with the layer or derivation it came from."""
    values = {key: (value, plan.option_sources.get(key, ""), _plan_origin(key, plan, resolution.options.values))
              for key, value in plan.options.items()}
    return _Shown(_rows(target, values, secrets), plan, None, plan.warnings, plan.errors)


def _layers_beside_plan(target: str, resolution: OptionResolution, request: PlanRequest,
                        secrets: list[str]) -> _Shown:
    """Without --model: the option layers, and what the plan of DIFF_MODEL writes otherwise."""
    try:
        plan = plan_request(request, get_target(target)).plan
    except LmiBuildError as failed:  # e.g. an unknown --profile: the option layers are still shown
        current().warn(f"could not plan {DIFF_MODEL} to compare with the plan: {_line(failed.message, failed.hint)}")
        plan = None
    rows = _rows(target, {key: (item.value, item.source.value, item.origin)
                          for key, item in resolution.options.values.items()}, secrets)
    differs = {} if plan is None else _plan_differs(rows, plan.options, secrets)
    return _Shown(rows, plan, differs, resolution.warnings, resolution.errors)


def _rows(target: str, values: Mapping[str, tuple[str, str, str | None]],
          secrets: list[str]) -> dict[str, dict[str, Any]]:
    return {key: {"value": redact(key, value, secrets), "source": source, "origin": origin,
                  "build_relevant": spec.is_build_relevant(target) if (spec := exact_spec(key)) else None}
            for key, (value, source, origin) in values.items()}


def _plan_differs(rows: dict[str, dict[str, Any]], planned: dict[str, str],
                  secrets: list[str]) -> dict[str, dict[str, str | None]]:
    """Each key whose shown value the plan writes otherwise (or not at all), then those only it writes."""
    differs: dict[str, dict[str, str | None]] = {
        key: {"shown": row["value"], "plan": redact(key, planned[key], secrets) if key in planned else None}
        for key, row in rows.items() if planned.get(key) != row["value"]}
    differs.update({key: {"shown": None, "plan": redact(key, value, secrets)}
                    for key, value in planned.items() if key not in rows})
    return differs


def _show_json(target: str, shown: _Shown, standing: StandingDefaults) -> dict[str, Any]:
    planned, plan = shown.differs is None, shown.plan
    return {
        "target": target,
        "resolved_by": "plan" if planned else "options",
        "model": plan.model.id if planned and plan is not None else None,
        "profile": plan.toolchain.profile if plan is not None else None,
        "options": shown.rows,
        # Without --model: the keys `lmi-build plan` writes otherwise, planned for DIFF_MODEL.
        "plan_differs": shown.differs,
        # ... and the stand-in model they were planned for: not the user's (issue 30 item 6).
        "plan_differs_model": DIFF_MODEL if not planned and plan is not None else None,
        # The config file's standing defaults (flags and the environment win over them).
        "config_file": {"path": str(standing.path), "exists": standing.path.exists(), "values": standing.values},
        "warnings": [message.model_dump() for message in shown.warnings],
        "errors": [message.model_dump() for message in shown.errors],
    }


def _say_what_differs(shown: _Shown) -> None:
    if not shown.differs or shown.plan is None:
        return
    changes = "; ".join(f"{key} {row['shown'] or '(unset)'} -> {row['plan'] or '(not written)'}"
                        for key, row in shown.differs.items())
    current().info(f"no --model: these are the option layers before planning. Planned for the stand-in model "
                   f"{DIFF_MODEL} (not yours; profile {shown.plan.toolchain.profile}), `lmi-build plan` writes other "
                   f"values for {len(shown.differs)} key(s), some of them the model's: {changes}. Add --model MODEL to "
                   "see the values the plan writes for yours.")


def _plan_origin(key: str, plan: BuildPlan[Any], layered: dict[str, Any]) -> str:
    source = plan.option_sources.get(key)
    if source == "derived":
        return "the plan"
    if source == "recipe":
        return f"recipe {plan.recipe}"
    item = layered.get(key)
    return (item.origin or "") if item is not None else ""


@config_app.command("options", epilog=_OPTIONS_EPILOG)
def options(
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Only options for this target, with its defaults.")
    ] = None,
) -> None:
    """The LMI option reference (key, type, default, choices, targets), generated from the table."""
    specs = [s for s in all_option_specs() if target is None or s.applies_to(_check_target(target))]
    data = [
        {
            "key": spec.key,
            "type": spec.type,
            "default": spec.default_for(target) if target else spec.default,
            "target_defaults": spec.target_defaults,
            "derived_default": spec.derived_default,
            "choices": list(spec.choices),
            "targets": list(spec.targets),
            "engines": list(spec.engines),
            "restricted": spec.restricted,
            "build_relevant": spec.is_build_relevant(target) if target else spec.build_relevant,
            "deprecated": spec.deprecated is not None,
            "description": spec.description,
        }
        for spec in specs
    ]
    current().result(data, _reference_table(data, target) if current().human else None)


def _line(message: str, hint: str | None) -> str:
    return f"{message} ({hint})" if hint else message


def _options_table(rows: dict[str, dict[str, Any]]) -> Any:
    table = Table(show_edge=False, header_style="bold")
    table.add_column("key", no_wrap=True, overflow="fold")
    for column in ("value", "source", "origin", "build"):
        table.add_column(column, overflow="fold")
    for key, row in rows.items():
        build = {True: "yes", False: "", None: "?"}[row["build_relevant"]]
        table.add_row(identifier(key), escape(row["value"]), row["source"], escape(row["origin"] or ""), build)
    return table


def _reference_table(data: list[dict[str, Any]], target: str | None) -> Any:
    title = f"LMI options{f' for {target}' if target else ''}"
    rows = []
    for row in data:
        default = row["default"]
        if default is None and row["derived_default"]:
            default = f"({row['derived_default']})"
        elif target is None and row["target_defaults"]:
            per_target = ", ".join(f"{t}: {v}" for t, v in row["target_defaults"].items())
            default = f"{default if default is not None else '-'} ({per_target})"
        flags = [flag for flag, on in (("restricted", row["restricted"]), ("deprecated", row["deprecated"])) if on]
        description = row["description"] + (f" [{', '.join(flags)}]" if flags else "")
        rows.append((row["key"], row["type"], default if default is not None else "", ", ".join(row["choices"]),
                     ", ".join(row["targets"]) or "pass-through", description))
    if current().out.width >= WIDE_REFERENCE:
        table = Table(show_edge=False, header_style="bold", title=title)
        table.add_column("key", no_wrap=True, overflow="fold")
        for column in ("type", "default", "choices", "targets"):
            table.add_column(column, overflow="fold")
        table.add_column("description", overflow="fold", min_width=30, ratio=1)
        for key, kind, default, choices, targets, description in rows:
            table.add_row(identifier(key), kind, escape(default), escape(choices), targets, escape(description))
        return table
    # Narrow (COLUMNS=80): one block per option, the key on its own line, the rest wrapped at spaces
    # under it, so no column is squeezed to a few letters.

    # A one-column grid: its cells wrap at the width (a bare Text printed with soft_wrap would not).
    table = Table.grid()
    table.add_column(overflow="fold")
    table.add_row(Text(title, style="italic"))
    for key, kind, default, choices, targets, description in rows:
        facts = [kind] + ([f"default {default}"] if default else []) + ([f"choices {choices}"] if choices else [])
        table.add_row(identifier(key, style="bold"))
        table.add_row(Padding(Text("; ".join([*facts, f"targets {targets}"]), overflow="fold"), (0, 0, 0, 4)))
        table.add_row(Padding(Text(description, overflow="fold"), (0, 0, 0, 4)))
    return table


# Below this width `config options` prints one block per option instead of a six-column table.
WIDE_REFERENCE = 140


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
