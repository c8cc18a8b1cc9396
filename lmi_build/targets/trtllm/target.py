"""The trtllm target object: planning (``plan``), the build (``build``), layouts and serving rules."""

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
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.startup import StartupOutcome
from lmi_build.targets.trtllm import build, compatibility, layouts, profiles
from lmi_build.targets.trtllm.command import COMMAND
from lmi_build.targets.trtllm.flags import flag_table
from lmi_build.targets.trtllm.knobs import TrtllmBuild, TrtllmRequest
from lmi_build.targets.trtllm.plan import TrtllmPlanning


class TrtllmTarget(TrtllmPlanning):
    knobs = TrtllmBuild
    command = COMMAND
    artifact_label = "TensorRT-LLM engines"
    request_knobs = TrtllmRequest

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        build.preflight(saved, settings)

    def check_compatibility(self, manifest: Manifest, serving: ServingTarget) -> Problems:
        return compatibility.check_compatibility(manifest, serving)

    def container_startup(self, manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
        return compatibility.container_startup(manifest, serving)

    def record_problems(self, manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
        return compatibility.record_problems(manifest, read)

    def build(self, ctx: BuildContext) -> None:
        build.build(ctx)

    def layouts(self) -> Mapping[str, Layout]:
        return layouts.LAYOUTS

    def build_devices(self, plan: BuildPlan) -> tuple[Literal["gpu", "neuron"], int] | None:
        return "gpu", plan.knobs(TrtllmBuild).world_size  # trtllm-build times kernels on one GPU per rank

    def unfinished(self, output: Path, plan: BuildPlan) -> Unfinished:
        return build.unfinished(output)

    def profile_rows(self) -> list[ProfileRow]:
        default = profiles.get_profile(None).name
        return [ProfileRow(p.name, p.name == default, f"TensorRT-LLM {p.tensorrt_llm}",
                           f"TensorRT {p.tensorrt}, CUDA {p.cuda}", p.layout, p.workflow, p.model_dump(mode="json"))
                for p in profiles.load_profiles()]

    def profile_view(self, name: str) -> ProfileView:
        """Versions, defaults, the trtllm-build flags of its TensorRT-LLM, and sources."""
        profile = profiles.get_profile(name)
        table = flag_table(profile.tensorrt_llm)
        data = {**profile.model_dump(mode="json"), "flag_series": table.series,
                "flags": {tool: dict(sorted(flags.items())) for tool, flags in table.tools.items()},
                "removed_flags": {k: v.model_dump() for k, v in table.removed.items()}}
        lines = [f"  {key}: {value}" for key, value in profile.versions().items()]
        lines.append(published_line(profile, profile.image))
        lines += [f"  layout: {profile.layout}   workflow: {profile.workflow}   engine_capable: {profile.engine_capable}"]
        lines += [f"  default {key} = {value}" for key, value in profile.defaults.items()]
        lines += [f"  flags (series {table.series}):"]
        lines += [f"    {tool}: " + " ".join(f"--{f}" for f in sorted(flags)) for tool, flags in table.tools.items()]
        lines += [f"  removed: --{k} ({v.message})" for k, v in table.removed.items()]
        if profile.notes:
            lines.append(f"  notes: {profile.notes}")
        lines += [f"  source: {s}" for s in profile.sources]
        return ProfileView(data, profile.image, lines)


TARGET = TrtllmTarget()
