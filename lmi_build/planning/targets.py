"""The planning half of the target interface, and the registry targets are looked up in.

A target turns a ``PlanContext`` into its build knobs (``TrtllmBuild`` / ``NeuronxBuild`` /
``HfBuild``), the serving.properties values it derives, its toolchain and the workload its memory
estimate is for, appending its own validations to ``ctx.findings``. The build half (``build``,
layouts, serving compatibility) is ``lmi_build.building.target.Target``.

Targets are plug-in packages above every shared layer (``lmi_build.targets.<name>``, each exporting
``TARGET``): the layers below reach them only through this registry, by name, never by import, so
the layer order stays one-way (docs/DESIGN.md). A new target adds one line to ``TARGET_PACKAGES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from lmi_build.errors import UnknownName
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import HfBuild, NeuronxBuild, ToolchainRef, TrtllmBuild
from lmi_build.recipes.schema import TargetSupport
from lmi_build.types import TargetName


@dataclass(frozen=True)
class ContainerFacts:
    """What verify needs to know of a serving container profile."""

    versions: dict[str, str]  # toolchain versions an artifact is bound to ("tensorrt_llm", "neuronx_cc", ...)
    engine_capable: bool = True  # False: the container cannot load compiled engines
    # Neuron: the neuronx-cc flags string this container computes for an artifact's
    # serving.properties (its NEURON_CC_FLAGS plus what DJL and TNX append); compared byte for byte.
    compiler_flags: Callable[[Mapping[str, str]], str] | None = None


@dataclass(frozen=True)
class TargetPlan:
    build: TrtllmBuild | NeuronxBuild | HfBuild
    toolchain: ToolchainRef
    workload: Workload
    dtype: str  # the weights' dtype for the memory estimate ("float16", ...)


class Target(Protocol):
    """What the planner needs of a target."""

    name: TargetName
    engine: str  # serving.properties engine= for this target

    def plan(self, ctx: PlanContext) -> TargetPlan: ...

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]: ...

    def toolchain(self, profile: str | None) -> ToolchainRef: ...

    def container_profiles(self) -> dict[str, ContainerFacts]:
        """The serving container profiles this target builds for, by name."""
        ...


TARGET_PACKAGES: dict[TargetName, str] = {
    "trtllm": "lmi_build.targets.trtllm",
    "neuronx": "lmi_build.targets.neuronx",
    "hf": "lmi_build.targets.hf",
}
TARGET_NAMES: tuple[TargetName, ...] = tuple(TARGET_PACKAGES)


def load_target(name: str) -> object:
    """The ``TARGET`` object of the target package called ``name`` (imported on first use only, so
    that loading one target does not load the others' data tables)."""
    package = TARGET_PACKAGES.get(name)  # type: ignore[call-overload]
    if package is None:
        raise UnknownName(f"unknown target '{name}'", hint=f"use one of: {', '.join(TARGET_PACKAGES)}")
    return importlib.import_module(package).TARGET


def get_target(name: str) -> Target:
    """The target called ``name`` (trtllm, neuronx, hf), for planning."""
    return cast(Target, load_target(name))


def container_facts(name: str) -> ContainerFacts:
    """The facts of the container profile called ``name``, whichever target owns it."""
    known: list[str] = []
    for target_name in TARGET_PACKAGES:
        profiles = get_target(target_name).container_profiles()
        if name in profiles:
            return profiles[name]
        known += profiles
    raise UnknownName(f"unknown container profile '{name}'",
                      hint=f"use one of: {', '.join(sorted(known))} (lmi-build profiles list)")
