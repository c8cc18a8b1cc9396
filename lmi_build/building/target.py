"""The one interface every target implements (``lmi_build.targets.<name>.TARGET``).

A target is an object handed down by its caller - the CLI, a fleet job - to the planner, the pipeline
and verify; nothing below the targets looks one up by name or imports one. Each layer that calls a
target names the part it uses (``planning.target_api.PlanningTarget``,
``artifact.target_api.ArtifactTarget``); this protocol is their sum plus the build itself, and the
registry (``lmi_build.targets.TARGETS``) is typed with it, so mypy checks every target against all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from lmi_build.artifact.target_api import ArtifactTarget
from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.building.run_settings import BuildCommand
from lmi_build.core.container_profiles import ProfileRow, ProfileView
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.target_api import PlanningTarget


@dataclass(frozen=True)
class Unfinished:
    """What an output a build stopped at (exit 3, or a --runner script bundle) lacks to be an artifact."""

    missing: str
    command: str  # the command that finishes it: the build's own `next:`
    where: str | None = None  # where that command must run, when it runs the vendor tool
    bundle: bool = False  # a --runner script bundle (that build exited 0), not a stop


class Target(PlanningTarget, ArtifactTarget, Protocol):
    @property
    def command(self) -> BuildCommand:
        """Its build command (``lmi-build <name>``): help, examples and its own run settings' flags."""
        ...

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        """Refuse settings that cannot work with this plan (a wrong --checkpoint, a missing
        --engine-dir, a target that cannot build yet) before anything is fetched or run."""
        ...

    def build(self, ctx: BuildContext) -> None:
        """Turn the fetched model into the directory its layout packages (set ``ctx.layout`` and
        ``ctx.produced``), or stop early (set ``ctx.stopped``). Nothing is written to the output
        here: the pipeline packages, verifies and installs."""
        ...

    def build_devices(self, plan: BuildPlan) -> tuple[Literal["gpu", "neuron"], int] | None:
        """The accelerators a build of ``plan`` occupies while it runs (a fleet schedules by it), or
        None when it needs none."""
        ...

    def unfinished(self, output: Path, plan: BuildPlan) -> Unfinished:
        """What ``output`` (a build of ``plan`` stopped there: plan.json, no manifest) lacks, and the
        command that finishes it."""
        ...

    def profile_rows(self) -> list[ProfileRow]:
        """Its container profiles as ``profiles list`` shows them, oldest first."""
        ...

    def profile_view(self, name: str) -> ProfileView:
        """``profiles show`` of its container profile ``name`` (one of ``container_profiles()``)."""
        ...
