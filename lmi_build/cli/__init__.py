"""The `lmi-build` command line. This file only wires command groups together; each command
lives in its own module, and heavy libraries are imported inside the command functions."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from lmi_build import __version__
from lmi_build.cli.app import debug_state, new_app
from lmi_build.errors import LmiBuildError
from lmi_build.output import current

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
        bool, typer.Option("--debug", help="Show tracebacks (also LMI_BUILD_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    if debug:
        debug_state.enabled = True


def _register() -> None:
    # One line per command module. Keep these modules light: no torch/transformers at import.
    from lmi_build.cli import commands

    commands.register(app)


_register()


def main() -> None:
    try:
        app()
    except LmiBuildError as error:
        if debug_state.enabled:
            raise
        current().error(error.one_line())
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        current().error("interrupted")
        sys.exit(130)
