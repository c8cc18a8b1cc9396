"""The types a build passes between the pipeline and a target's ``build``.

They live below the target packages so that targets, the pipeline and (later) fleet workers share
them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import BuildRecord, StepTiming
from lmi_build.building.run_settings import RunSettings
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import BuildInputs, SavedPlan
from lmi_build.sources.base import ResolvedSource

Status = Literal["artifact", "cached", "checkpoint", "script"]


@dataclass(frozen=True)
class BuildSettings:
    """How to run a plan (never what to build: that is the plan's job)."""

    output: Path
    run: RunSettings = field(default_factory=RunSettings)  # the target's own part (its build command's flags)
    overwrite: bool = False
    use_cache: bool = True
    keep_work: bool = False
    copy: bool = False  # copy files into the artifact instead of hard-linking them
    publish: str | None = None
    endpoint_url: str | None = None
    remote_cache: str | None = None  # s3://bucket/prefix of the shared build cache (storage.build_cache)
    # The user's input files (--plan, --properties): never inside an output --overwrite replaces.
    inputs: tuple[Path, ...] = ()
    plan_file: Path | None = None  # --plan: the saved plan this build executes


@dataclass
class BuildOutcome:
    plan: BuildPlan
    status: Status
    output: Path
    steps: list[StepTiming] = field(default_factory=list)
    next_command: str | None = None  # what finishes the job when it stopped early
    next_host: str | None = None  # where next_command can run, in words ("a GPU host with ...")
    message: str = ""
    published: dict[str, Any] | None = None
    stand_in: bool = False  # the engines came from a test stand-in, not the vendor compiler
    # A cached outcome: ``steps`` is what ran now (the cache step); the original build's steps and
    # when it ran come from the artifact's manifest, never shown as if they had just run.
    original_steps: list[StepTiming] | None = None
    original_built_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "output": str(self.output),
            "target": self.plan.target,
            "cache_key": self.plan.cache_key,
            "steps": [step.model_dump(mode="json") for step in self.steps],
            "next_command": self.next_command,
            "next_host": self.next_host,
            "message": self.message,
            "published": self.published,
            "stand_in": self.stand_in,
            **({"original_build": {"at": self.original_built_at,
                                   "steps": [step.model_dump(mode="json") for step in self.original_steps]}}
               if self.original_steps is not None else {}),
        }


@dataclass
class BuildContext:
    """What a target's ``build`` reads, and what it leaves for the pipeline to package."""

    saved: SavedPlan
    settings: BuildSettings
    source: ResolvedSource
    work: Path  # a scratch directory beside the output (same filesystem), removed afterwards
    record: BuildRecord
    layout: Layout | None = None  # the artifact layout (one of the target's) the produced directory is packaged with
    produced: Path | None = None
    stopped: BuildOutcome | None = None  # set when the target stops before an artifact
    stand_in: bool = False

    @property
    def plan(self) -> BuildPlan:
        return self.saved.plan

    @property
    def inputs(self) -> BuildInputs:
        return self.saved.inputs
