"""Registration of every command module, in the order ``lmi-build --help`` lists their commands."""

import os
import sys

import typer

from lmi_build.cli import (
    artifact_cmd,
    build_cmd,
    config_cmd,
    demo_cmd,
    matrix_cmd,
    plan_cmd,
    profiles_cmd,
    recipes_cmd,
    storage_cmd,
)

COMMAND_MODULES = (build_cmd, plan_cmd, artifact_cmd, storage_cmd, matrix_cmd, config_cmd, recipes_cmd,
                   profiles_cmd, demo_cmd)

APP_HELP = ("Compile LLMs ahead of time and package them for the LMI (DJL Serving) containers.\n\n"
            "Inputs are the ones the container takes (serving.properties, OPTION_* env, HF ids, s3://).")
APP_EPILOG = "Run 'lmi-build COMMAND --help' for a command's options and examples."


def register(app: typer.Typer) -> None:
    for module in COMMAND_MODULES:
        module.register(app)


def prog_name() -> str:
    """The program name as click shows it (``python -m lmi_build`` when run as a module)."""
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "lmi-build"
    return "python -m lmi_build" if base == "__main__.py" else base
