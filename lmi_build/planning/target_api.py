"""What planning needs of a target, and what a target's planning returns.

A target turns a ``PlanContext`` into its own build knobs (a ``TargetKnobs`` subclass it declares),
the serving.properties values it derives, its toolchain and the workload its memory estimate is for,
appending its validations to ``ctx.findings``. The planner is handed the target object by its caller
(the CLI, a fleet job): nothing here looks a target up. The whole protocol a target implements is
``lmi_build.building.target.Target``; this is the part of it the planning layers call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from lmi_build.core.types import TargetName
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning.checkpoint_estimate import CheckpointWork
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import TargetKnobs, ToolchainRef
from lmi_build.planning.quantization import QuantizationRules
from lmi_build.planning.request import TargetRequest
from lmi_build.recipes.schema import Recipe, TargetSupport


@dataclass(frozen=True)
class ContainerFacts:
    """What verify needs to know of a serving container profile."""

    versions: dict[str, str]  # toolchain versions an artifact is bound to ("tensorrt_llm", "neuronx_cc", ...)
    engine_capable: bool = True  # False: the container cannot load compiled engines
    # Neuron: the neuronx-cc flags string this container computes for an artifact's
    # serving.properties (its NEURON_CC_FLAGS plus what DJL and TNX append); compared byte for byte.
    compiler_flags: Callable[[Mapping[str, str]], str] | None = None


@dataclass(frozen=True)
class RecipeRoute:
    """What one container profile offers one recipe, before any model is read (``recipes list --profile``):
    the route it builds by, or, cited, why it does not (for a family the profile's toolchain lacks, the
    first release that has it). Model-specific refusals (a RoPE type, a head count) are the plan's."""

    builds: bool
    route: str | None = None  # how, when it builds
    reason: str | None = None  # why not, when it does not


@dataclass(frozen=True)
class TargetPlan:
    build: TargetKnobs
    toolchain: ToolchainRef
    workload: Workload
    dtype: str  # the weights' dtype for the memory estimate ("float16", ...)
    # The convert/quantize step this host runs for the plan (None: none here, e.g. the vendor
    # converter runs in the container, or the NEFF compile reads the weights itself).
    checkpoint_work: CheckpointWork | None = None


class PlanningTarget(Protocol):
    """The planning half of ``lmi_build.building.target.Target``."""

    @property
    def name(self) -> TargetName: ...

    @property
    def engine(self) -> str:  # serving.properties engine= for this target
        ...

    @property
    def accelerator(self) -> Literal["gpu", "neuron"]:  # what its artifacts are served on
        ...

    @property
    def knobs(self) -> type[TargetKnobs]:  # its build knobs' model (discriminated on ``target``)
        ...

    @property
    def quantization(self) -> QuantizationRules:  # its quantization rules
        ...

    @property
    def request_knobs(self) -> type[TargetRequest]:  # the knobs only it takes (flags, matrix keys)
        ...

    def plan(self, ctx: PlanContext) -> TargetPlan: ...

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]: ...

    def toolchain(self, profile: str | None) -> ToolchainRef: ...

    def container_profiles(self) -> dict[str, ContainerFacts]:
        """The serving container profiles this target builds for, by name."""
        ...

    def recipe_route(self, recipe: Recipe, support: TargetSupport, profile: str) -> RecipeRoute:
        """What container profile ``profile`` (one of ``container_profiles()``) offers ``recipe``, whose
        ``support`` for this target is given (``route_for`` answers for a recipe without one)."""
        ...


def route_for(target: PlanningTarget, recipe: Recipe, profile: str) -> RecipeRoute:
    """What ``target``'s container profile ``profile`` offers ``recipe``: a recipe without this target is
    refused with its own cited reason (``[unsupported]``), as the planner refuses it."""
    support = recipe.targets.get(target.name)
    if support is None:
        reason = recipe.unsupported.get(target.name)
        others = ", ".join(recipe.targets) or "none"
        return RecipeRoute(False, reason=reason or f"recipe {recipe.name} has no {target.name} route "
                                                   f"(targets that support it: {others})")
    return target.recipe_route(recipe, support, profile)
