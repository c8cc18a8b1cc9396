"""Registration of every command module: one line each."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    # Each entry: `from lmi_build.cli import <module>; <module>.register(app)`.
    pass
