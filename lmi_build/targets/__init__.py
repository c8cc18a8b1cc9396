"""Target packages: one per thing lmi-build compiles for (``trtllm``, ``neuronx``, ``hf``), and their
registry.

Each package owns everything about its target (planning, knobs, steps, build, layouts, profiles, flag
tables, engine checks, serving compatibility) and exports ``TARGET``, an object with the
``lmi_build.building.target.Target`` interface. The command line resolves a target here once and
hands the object down to the planner, the pipeline and verify; nothing below this package imports
a target. A new target is one package plus one line in ``TARGETS`` (docs/DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field as Field_
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field

from lmi_build.building.target import Target
from lmi_build.core.errors import UnknownName
from lmi_build.planning.request import Knob, PlanRequest, ordered_knobs
from lmi_build.planning.request import request_for as build_request
from lmi_build.planning.saved import SavedPlan, parse_saved_plan, read_saved_plan
from lmi_build.targets import hf, neuronx, trtllm

TARGETS: dict[str, Target] = {target.name: target for target in (trtllm.TARGET, neuronx.TARGET, hf.TARGET)}

# Every target's build knobs, told apart by their ``target`` field: what a saved plan's ``build`` is
# read as (a trtllm plan missing a field is an error, never an hf plan). Made from TARGETS, so a new
# target's knobs join it with its registry line.
PlanKnobs: Any = Annotated[Union[tuple(target.knobs for target in TARGETS.values())],
                           Field(discriminator="target")]


def every_knob() -> list[tuple[Field_[Any], Knob]]:
    """Every knob, each once, in --help order: ``PlanRequest``'s and each target's (what `plan` and a matrix
    build take)."""
    return ordered_knobs(target.request_knobs for target in TARGETS.values())


def request_for(name: str, values: Mapping[str, Any], **not_knobs: Any) -> PlanRequest:
    """The request of a build for target ``name`` from knob values by field name (any target's: see
    ``planning.request.request_for``); ``not_knobs``: ``endpoint_url``, ``env``."""
    return build_request(get_target(name).request_knobs, (target.request_knobs for target in TARGETS.values()),
                         values, **not_knobs)


def get_target(name: str) -> Target:
    """The target called ``name`` (trtllm, neuronx, hf)."""
    target = TARGETS.get(name)
    if target is None:
        raise UnknownName(f"unknown target '{name}'", hint=f"use one of: {', '.join(TARGETS)}")
    return target


def load_saved_plan(path: Path) -> SavedPlan[Any]:
    """A saved plan (``plan ... --save``), its knobs read as its own target's."""
    saved: SavedPlan[Any] = read_saved_plan(path, SavedPlan[PlanKnobs])
    return saved


def parse_plan_text(text: str, origin: str) -> SavedPlan[Any]:
    """A saved plan's text (as a fleet task carries it), checked as a plan file is."""
    saved: SavedPlan[Any] = parse_saved_plan(text, origin, SavedPlan[PlanKnobs])
    return saved
