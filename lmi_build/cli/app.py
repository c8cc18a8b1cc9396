"""The app factory and the options every command shares, declared once."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from lmi_build.output import Mode, set_mode

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def new_app(help: str | None = None) -> typer.Typer:
    return typer.Typer(
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings=CONTEXT_SETTINGS,
    )


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (for CI).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")]


def output_mode(json_output: bool, quiet: bool) -> None:
    """Select the process-wide output mode from a command's --json/--quiet flags."""
    set_mode(Mode.JSON if json_output else Mode.QUIET if quiet else Mode.HUMAN)


class _Debug:
    enabled: bool = os.environ.get("LMI_BUILD_DEBUG", "") not in ("", "0", "false")


debug_state = _Debug()


def _version(value: bool) -> None:
    if value:
        from lmi_build import __version__

        print(f"lmi-build {__version__}")
        raise typer.Exit()


# The root options; their help texts are also in lmi_build.cli.commands.ROOT_OPTIONS (static --help).
def root_callback(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks (also LMI_BUILD_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    if debug:
        debug_state.enabled = True
