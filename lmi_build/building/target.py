"""The whole target interface: planning (``lmi_build.planning.targets``) plus building."""

from __future__ import annotations

from typing import Protocol, cast

from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.targets import Target as PlanningTarget
from lmi_build.planning.targets import load_target


class Target(PlanningTarget, Protocol):
    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        """Refuse settings that cannot work with this plan (a wrong --checkpoint, a missing
        --engine-dir, a target that cannot build yet) before anything is fetched or run."""

    def build(self, ctx: BuildContext) -> None:
        """Turn the fetched model into the directory its layout packages (set ``ctx.layout`` and
        ``ctx.produced``), or stop early (set ``ctx.stopped``). Nothing is written to the output
        here: the pipeline packages, verifies and installs."""


def get_target(name: str) -> Target:
    """The target called ``name``, for building."""
    return cast(Target, load_target(name))
