"""The neuronx target object: planning (``plan``), the build (``build``), layouts and serving rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import Manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import Problems, ReadFile
from lmi_build.building.context import BuildContext, BuildSettings
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.startup import StartupOutcome
from lmi_build.targets.neuronx import build, compatibility, layouts
from lmi_build.targets.neuronx.knobs import NeuronxBuild, NeuronxRequest
from lmi_build.targets.neuronx.plan import NeuronxPlanning
from lmi_build.types import PlanMessage


class NeuronxTarget(NeuronxPlanning):
    knobs = NeuronxBuild
    request_knobs = NeuronxRequest

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        build.preflight(saved, settings)

    def build(self, ctx: BuildContext) -> None:
        build.build(ctx)

    def layouts(self) -> Mapping[str, Layout]:
        return layouts.LAYOUTS

    def build_devices(self, plan: BuildPlan) -> tuple[Literal["gpu", "neuron"], int] | None:
        return "neuron", plan.knobs(NeuronxBuild).tp  # TNX loads the NEFFs onto the cores while compiling

    def check_compatibility(self, manifest: Manifest, serving: ServingTarget) -> Problems:
        return compatibility.check_compatibility(manifest, serving)

    def container_startup(self, manifest: Manifest, serving: ServingTarget) -> StartupOutcome | None:
        return compatibility.container_startup(manifest, serving)

    def record_problems(self, manifest: Manifest, read: ReadFile) -> list[PlanMessage]:
        return compatibility.record_problems(manifest, read)


TARGET = NeuronxTarget()
