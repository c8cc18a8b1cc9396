"""The one interface every target implements (``lmi_build.targets.<name>.TARGET``).

A target is an object handed down by its caller - the CLI, a fleet job - to the planner, the pipeline
and verify; nothing below the targets looks one up by name or imports one. Each layer that calls a
target names the part it uses (``planning.target_api.PlanningTarget``,
``artifact.target_api.ArtifactTarget``); this protocol is their sum plus the build itself, and the
registry (``lmi_build.targets.TARGETS``) is typed with it, so mypy checks every target against all of it.
"""

from __future__ import annotations

from typing import Literal, Protocol

from lmi_build.artifact.target_api import ArtifactTarget
from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.container_profiles import ProfileRow, ProfileView
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.target_api import PlanningTarget


class Target(PlanningTarget, ArtifactTarget, Protocol):
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

    def profile_rows(self) -> list[ProfileRow]:
        """Its container profiles as ``profiles list`` shows them, oldest first."""
        ...

    def profile_view(self, name: str) -> ProfileView | None:
        """``profiles show`` of its container profile ``name``; None when it has none of that name."""
        ...
