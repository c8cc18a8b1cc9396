"""The `lmi-build` command line. This file only wires command groups together; each command
lives in its own module, and heavy libraries are imported inside the command functions.

Start-up is kept short on purpose (benchmarks/startup.py): importing this package loads neither
typer nor rich. ``main()`` answers ``--help`` and ``--version`` from a static table, and for any
other command line builds a typer app holding only the command it names. ``app`` (the full app,
every command registered) is built on first access, for tests and ``typer.testing``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from lmi_build import __version__
from lmi_build.cli import commands

if TYPE_CHECKING:
    import typer


def build_app(modules: tuple[str, ...] = commands.COMMAND_MODULES) -> typer.Typer:
    """The typer app with the commands of ``modules`` registered (all by default)."""
    from lmi_build.cli.app import new_app, root_callback

    app = new_app(help=commands.APP_HELP)
    app.callback()(root_callback)
    # One line per command module. Keep these modules light: no torch/transformers at import.
    commands.register(app, modules)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # built once, on first use: `from lmi_build.cli import app`
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    args = sys.argv[1:]
    if args in (["--help"], ["-h"], []):
        sys.stdout.write(commands.top_level_help())
        sys.exit(0 if args else 2)  # no arguments: help, with click's usage-error status
    if args == ["--version"]:
        print(f"lmi-build {__version__}")
        return
    from lmi_build.errors import LmiBuildError
    from lmi_build.output import current

    app = build_app(commands.modules_for(args))
    try:
        app()
    except LmiBuildError as error:
        from lmi_build.cli.app import debug_state

        if debug_state.enabled:
            raise
        current().error(error.one_line())
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        current().error("interrupted")
        sys.exit(130)
