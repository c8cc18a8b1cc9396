"""The interface every target implements, and the registry the planner looks targets up in.

A target turns a ``PlanContext`` into its build knobs (``TrtllmBuild`` / ``NeuronxBuild`` /
``HfBuild``), the serving.properties values it derives, its toolchain and the workload its memory
estimate is for, appending its own validations to ``ctx.findings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from lmi_build.errors import UnsupportedTarget
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import HfBuild, NeuronxBuild, TargetName, ToolchainRef, TrtllmBuild
from lmi_build.recipes.schema import TargetSupport


@dataclass(frozen=True)
class TargetPlan:
    build: TrtllmBuild | NeuronxBuild | HfBuild
    toolchain: ToolchainRef
    workload: Workload
    dtype: str  # the weights' dtype for the memory estimate ("float16", ...)


class Target(Protocol):
    name: TargetName
    engine: str  # serving.properties engine= for this target

    def plan(self, ctx: PlanContext) -> TargetPlan: ...

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]: ...

    def toolchain(self, profile: str | None) -> ToolchainRef: ...


def get_target(name: str) -> Target:
    """The target called ``name`` (trtllm, neuronx, hf)."""
    # Imported here so that loading one target does not load the others' data tables.
    from lmi_build.targets.hf import HF
    from lmi_build.targets.neuronx import NEURONX
    from lmi_build.targets.trtllm import TRTLLM

    registry: dict[str, Target] = {t.name: t for t in (TRTLLM, NEURONX, HF)}
    found = registry.get(name)
    if found is None:
        raise UnsupportedTarget(f"unknown target '{name}'", hint=f"use one of: {', '.join(registry)}")
    return found


TARGET_NAMES: tuple[TargetName, ...] = ("trtllm", "neuronx", "hf")
