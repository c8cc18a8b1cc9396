"""Registration of every command module: one name each, in the order `--help` lists them."""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = (
    "build_cmd",  # trtllm, hf
    "plan_cmd",  # plan
    "artifact_cmd",  # verify, inspect
    "storage_cmd",  # publish, pull
    "config_cmd",  # config show|options
    "recipes_cmd",  # recipes list|show
    "profiles_cmd",  # profiles list|show
)


def register(app: typer.Typer) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"lmi_build.cli.{name}").register(app)
