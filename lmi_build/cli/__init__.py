"""The `lmi-build` command line. This file only wires command groups together; each command
lives in its own module, and heavy libraries are imported inside the command functions."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Annotated

import typer

from lmi_build import __version__
from lmi_build.cli.app import new_app
from lmi_build.errors import LmiBuildError
from lmi_build.output import Mode, current, debugging, reset, set_debugging, set_mode

app = new_app(
    help="Compile LLMs ahead of time and package them for the LMI (DJL Serving) containers.\n\n"
    "Inputs are the ones the container takes (serving.properties, OPTION_* env, HF ids, s3://)."
)


def _version(value: bool) -> None:
    if value:
        print(f"lmi-build {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and what libraries print (also LMI_BUILD_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    # Runs before the subcommand's flags are parsed: every command line starts from human output,
    # and the command's own --json/--quiet/--debug then apply.
    reset()
    if debug:
        set_debugging(True)


def _register() -> None:
    # One line per command module. Keep these modules light: no torch/transformers at import.
    from lmi_build.cli import commands

    commands.register(app)


_register()


def main(argv: Sequence[str] | None = None) -> None:
    """The console script. An ``LmiBuildError`` or a usage error (unknown flag, bad value) is one
    line on stderr (and, with --json, ``{"error": ...}`` on stdout) and exit status 1, or 2 for an
    invalid plan or artifact; --debug shows the traceback instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    sys.exit(_run(args))


def _run(args: list[str]) -> int:
    errors = _click_exceptions()
    no_args_is_help = getattr(errors, "NoArgsIsHelpError", ())
    try:
        status = app(args=args, prog_name="lmi-build", standalone_mode=False)
    except LmiBuildError as error:
        if debugging():
            raise
        current().failure(error.code, error.message, error.hint)
        return error.exit_code
    except no_args_is_help:
        return 1  # typer has printed the group's help: no command was given
    except errors.ClickException as error:  # a usage error: unknown flag or command, bad value
        if _asks_for_json(args):  # --json may come after the flag that failed to parse
            set_mode(Mode.JSON)
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "lmi-build"
        current().failure("usage", error.format_message(), f"see: {command} --help")
        return 1
    except typer.Abort:
        current().error("aborted")
        return 1
    except KeyboardInterrupt:
        current().error("interrupted")
        return 130
    return status if isinstance(status, int) else 0


def _click_exceptions() -> ModuleType:
    """click's exception classes: typer >= 0.29 carries its own copy of click, older typer uses click."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:
        return importlib.import_module("click.exceptions")


def _asks_for_json(args: list[str]) -> bool:
    given = args[: args.index("--")] if "--" in args else args
    return "--json" in given
