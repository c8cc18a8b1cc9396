"""The layout contract: where each produced file goes and what serving.properties needs.

Each target package declares its layouts (``Target.layouts()``); the packager and verify get the
layout from the target they are handed, never by importing a target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from lmi_build.core.types import PlanMessage
from lmi_build.planning.plan import BuildPlan


class Layout(Protocol):
    name: str

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        """Place the produced files (engine dir, checkpoint, ...) and the carried source files
        (tokenizer, generation config, chat templates, custom code) under ``staging``. Use
        ``lmi_build.core.fs.link_or_copy`` for every file."""

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        """serving.properties keys this layout needs on top of the plan's options."""

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        """Structural completeness problems of an artifact of this layout (empty when complete)."""
