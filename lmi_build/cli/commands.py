"""Registration of every command module: one line each."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    # Each entry: `from lmi_build.cli import <module>; <module>.register(app)`.
    from lmi_build.cli import artifact_cmd; artifact_cmd.register(app)  # noqa: E702
    from lmi_build.cli import plan_cmd; plan_cmd.register(app)  # noqa: E702
    from lmi_build.cli import storage_cmd; storage_cmd.register(app)  # noqa: E702
    from lmi_build.cli import recipes_cmd; recipes_cmd.register(app)  # noqa: E702
    from lmi_build.cli import config_cmd; config_cmd.register(app)  # noqa: E702
    from lmi_build.cli import profiles_cmd; profiles_cmd.register(app)  # noqa: E702
    pass
