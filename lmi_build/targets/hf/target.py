"""The hf target object: planning (``plan``), the build (``build``), layouts and serving rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import Problems, ReadFile
from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.building.target import Unfinished
from lmi_build.core.container_profiles import ProfileRow, ProfileView, published_line
from lmi_build.core.types import PlanMessage
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import PLAN_FILE, SavedPlan
from lmi_build.planning.startup import StartupOutcome
from lmi_build.runners.bundle import finished_output
from lmi_build.targets.hf import build, compatibility, layouts, profiles
from lmi_build.targets.hf.command import COMMAND
from lmi_build.targets.hf.knobs import HfBuild, HfRequest
from lmi_build.targets.hf.plan import HfPlanning


class HfTarget(HfPlanning):
    knobs = HfBuild
    command = COMMAND
    artifact_label = "a Hugging Face checkpoint"
    request_knobs = HfRequest

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        build.preflight(saved, settings)

    def check_compatibility(self, manifest: Manifest, serving: ServingTarget) -> Problems:
        return compatibility.check_compatibility(manifest, serving)

    def record_problems(self, manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
        return compatibility.record_problems(manifest, read)

    def build(self, ctx: BuildContext) -> None:
        build.build(ctx)

    def layouts(self) -> Mapping[str, Layout]:
        return layouts.LAYOUTS

    def build_devices(self, plan: BuildPlan) -> tuple[Literal["gpu", "neuron"], int] | None:
        return None  # conversion and calibration use a GPU when there is one, the CPU otherwise

    def container_startup(self, manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
        return None  # no start-up model of this target's containers yet

    def unfinished(self, output: Path, plan: BuildPlan) -> Unfinished:
        return Unfinished("the built model", build.finish_command(output / PLAN_FILE, output=finished_output(output)))

    def profile_rows(self) -> list[ProfileRow]:
        """No default: without --profile an hf build writes the format the newest profile loads."""
        return [ProfileRow(h.name, False, h.runs_on, f"transformers {h.transformers}",
                           "hf (" + ", ".join(f"{m}->{f}" for m, f in h.formats.items() if f) + ")", h.engine,
                           h.model_dump(mode="json"))
                for h in profiles.load_profiles()]

    def profile_view(self, name: str) -> ProfileView:
        """Versions, the format each --quantize method is loaded in, and sources."""
        profile = profiles.get_profile(name)
        lines = [f"  {key}: {value}" for key, value in profile.versions().items()]
        lines.append(published_line(profile, None))
        lines += [f"  --quantize {method}: " + (f"{fmt} checkpoint" if fmt else "not loadable (refused)")
                  for method, fmt in profile.formats.items()]
        if profile.inferred:
            lines.append(f"  inferred (not checked against a source): {'; '.join(profile.inferred)}")
        lines += [f"  source: {s}" for s in profile.sources]
        return ProfileView({"kind": "hf", **profile.model_dump(mode="json")}, f"engine {profile.engine}", lines)


TARGET = HfTarget()
