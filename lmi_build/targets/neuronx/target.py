"""The neuronx target object: planning (``plan``), the build (``build``), layouts and serving rules."""

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
from lmi_build.targets.neuronx import build, compatibility, layouts, profiles
from lmi_build.targets.neuronx.command import COMMAND
from lmi_build.targets.neuronx.knobs import NeuronxBuild, NeuronxRequest
from lmi_build.targets.neuronx.plan import NeuronxPlanning
from lmi_build.targets.neuronx.sdk import sdk


class NeuronxTarget(NeuronxPlanning):
    knobs = NeuronxBuild
    command = COMMAND
    artifact_label = "Neuron NEFFs"
    request_knobs = NeuronxRequest

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        build.preflight(saved, settings)

    def check_compatibility(self, manifest: Manifest, serving: ServingTarget) -> Problems:
        return compatibility.check_compatibility(manifest, serving)

    def container_startup(self, manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
        return compatibility.container_startup(manifest, serving)

    def record_problems(self, manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
        return compatibility.record_problems(manifest, read)

    def unfinished(self, output: Path, plan: BuildPlan) -> Unfinished:
        return build.unfinished(output, plan)

    def build(self, ctx: BuildContext) -> None:
        build.build(ctx)

    def layouts(self) -> Mapping[str, Layout]:
        return layouts.LAYOUTS

    def build_devices(self, plan: BuildPlan) -> tuple[Literal["gpu", "neuron"], int] | None:
        return "neuron", plan.knobs(NeuronxBuild).tp  # TNX loads the NEFFs onto the cores while compiling

    def profile_rows(self) -> list[ProfileRow]:
        default = profiles.get_profile(None).name
        return [ProfileRow(n.name, n.name == default, f"neuronx-cc {n.neuronx_cc}",
                           f"Neuron SDK {n.neuron_sdk}, TNX {n.transformers_neuronx}", n.layout, n.default_loader,
                           n.model_dump(mode="json"))
                for n in profiles.load_profiles()]

    def profile_view(self, name: str) -> ProfileView:
        """Versions, compiler flags and cache directory, loaders, layout, and sources."""
        profile = profiles.get_profile(name)
        unbuilt = {loader: why for loader, why in sdk().unbuilt_loaders.items() if loader in profile.model_loaders}
        data = {"kind": "neuronx", **profile.model_dump(mode="json"), "cache_dir": profile.cache_dir_name,
                "unbuilt_loaders": {loader: why.model_dump(mode="json") for loader, why in unbuilt.items()}}
        lines = [f"  {key}: {value}" for key, value in profile.versions().items()]
        lines.append(published_line(profile, profile.image))
        lines += [f"  NEURON_CC_FLAGS: {profile.neuron_cc_flags}", f"  compile cache: {profile.cache_dir_name}/",
                  f"  default loader: {profile.default_loader} (switch to TNX: {profile.tnx_switch}); "
                  f"option.model_loader: {', '.join(profile.model_loaders) or 'none'}",
                  f"  layout: {profile.layout}   released: {profile.released}"]
        if profile.split_layout_unbuilt:
            lines.append(f"  not built: {profile.split_layout_unbuilt}")
        lines += [f"  not built: option.model_loader={loader}: {why.reason}" for loader, why in unbuilt.items()]
        if profile.inferred:
            lines.append(f"  inferred (not checked against a source): {', '.join(profile.inferred)}")
        if profile.notes:
            lines.append(f"  notes: {profile.notes}")
        lines += [f"  source: {s}" for s in profile.sources]
        return ProfileView(data, profile.image or "(no published image)", lines)


TARGET = NeuronxTarget()
