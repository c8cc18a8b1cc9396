"""``lmi-build config show`` and ``lmi-build config options``: resolved options and the table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from lmi_build.cli.app import new_app
from lmi_build.output import current, identifier

config_app = new_app(help="Show how LMI options resolve, and the option reference.")

_SHOW_EPILOG = """Examples:

  lmi-build config show --target trtllm --properties serving.properties --option max_input_len=2048

  OPTION_TENSOR_PARALLEL_DEGREE=4 lmi-build config show --json | jq .options

Precedence (first wins): --option > --properties file > environment > engine alias > recipe > table default.
Exit status 2 when a value is invalid (or, with --strict, on any warning)."""

_OPTIONS_EPILOG = """Examples:

  lmi-build config options --target neuronx

  lmi-build config options --json | jq '.[] | select(.build_relevant == true) | .key'"""


def _check_target(target: str) -> str:
    from lmi_build.errors import OptionError
    from lmi_build.options.spec import TARGETS

    if target not in TARGETS:
        raise OptionError(f"unknown target {target!r}", hint=f"use --target {' or '.join(TARGETS)}")
    return target


@config_app.command("show", epilog=_SHOW_EPILOG)
def show(
    target: Annotated[str, typer.Option("--target", "-t", help="Build target: trtllm, neuronx or hf.")] = "trtllm",
    properties: Annotated[
        Path | None, typer.Option("--properties", "-p", help="A serving.properties file.", dir_okay=False)
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="key=value, repeatable (wins over everything).")
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Treat every warning as an error.")] = False,
    no_env: Annotated[bool, typer.Option("--no-env", help="Ignore OPTION_*/HF_*/SM_* variables.")] = False,
) -> None:
    """Print every resolved option with its value and where it came from."""
    from lmi_build.options.resolve import OptionInputs, cli_option_pairs, resolve_options
    from lmi_build.options.spec import exact_spec
    from lmi_build.redaction import redact, secret_values

    env: dict[str, str] = {} if no_env else dict(os.environ)
    inputs = OptionInputs(cli=cli_option_pairs(option or []), properties_file=properties, env=env)
    resolution = resolve_options(inputs, target=_check_target(target), strict=strict)
    secrets = secret_values(env)

    rows: dict[str, dict[str, Any]] = {}
    for key, item in resolution.options.values.items():
        spec = exact_spec(key)
        rows[key] = {
            "value": redact(key, item.value, secrets),
            "source": item.source.value,
            "origin": item.origin,
            "build_relevant": spec.is_build_relevant(target) if spec else None,
        }
    data = {
        "target": target,
        "options": rows,
        "warnings": [message.model_dump() for message in resolution.warnings],
        "errors": [message.model_dump() for message in resolution.errors],
    }
    out = current()
    out.result(data, _options_table(rows) if out.human else None)
    for warning in resolution.warnings:
        out.warn(_line(warning.message, warning.hint))
    for error in resolution.errors:
        out.error(_line(error.message, error.hint))
    if resolution.errors:
        raise typer.Exit(2)


@config_app.command("options", epilog=_OPTIONS_EPILOG)
def options(
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Only options for this target, with its defaults.")
    ] = None,
) -> None:
    """The LMI option reference (key, type, default, choices, targets), generated from the table."""
    from lmi_build.options.spec import all_option_specs

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
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    table.add_column("key", no_wrap=True, overflow="fold")
    for column in ("value", "source", "origin", "build"):
        table.add_column(column, overflow="fold")
    for key, row in rows.items():
        build = {True: "yes", False: "", None: "?"}[row["build_relevant"]]
        table.add_row(identifier(key), escape(row["value"]), row["source"], escape(row["origin"] or ""), build)
    return table


def _reference_table(data: list[dict[str, Any]], target: str | None) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold", title=f"LMI options{f' for {target}' if target else ''}")
    table.add_column("key", no_wrap=True, overflow="fold")
    for column in ("type", "default", "choices", "targets"):
        table.add_column(column, overflow="fold")
    table.add_column("description", overflow="fold", min_width=30, ratio=1)
    for row in data:
        default = row["default"]
        if default is None and row["derived_default"]:
            default = f"({row['derived_default']})"
        elif target is None and row["target_defaults"]:
            per_target = ", ".join(f"{t}: {v}" for t, v in row["target_defaults"].items())
            default = f"{default if default is not None else '-'} ({per_target})"
        flags = [flag for flag, on in (("restricted", row["restricted"]), ("deprecated", row["deprecated"])) if on]
        description = row["description"] + (f" [{', '.join(flags)}]" if flags else "")
        table.add_row(
            identifier(row["key"]),
            row["type"],
            escape(default if default is not None else ""),
            escape(", ".join(row["choices"])),
            ", ".join(row["targets"]) or "pass-through",
            escape(description),
        )
    return table


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
