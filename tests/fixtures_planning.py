"""Fixtures for the planner's tests: fixture config.json files copied into model directories,
and a helper that plans one of them with an isolated (empty) environment."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.planning.plan import BuildPlan
from tests.conftest import FIXTURE_CONFIGS

ModelDirFactory = Callable[..., Path]
Planner = Callable[..., BuildPlan]


@pytest.fixture
def model_dir(tmp_path: Path) -> ModelDirFactory:
    """``model_dir("meta-llama--Llama-2-7b-hf", **config_overrides)`` -> a directory holding that
    fixture's config.json (with the overrides merged in) and its placeholder tokenizer.json, named after
    the model."""

    made: set[Path] = set()

    def make(name: str, *, dirname: str | None = None, **overrides: Any) -> Path:
        source = FIXTURE_CONFIGS / name / "config.json"
        target = tmp_path / "models" / (dirname or name)
        if not overrides and target in made and sorted(os.listdir(target)) == ["config.json", "tokenizer.json"] \
                and (target / "config.json").read_bytes() == source.read_bytes():
            return target  # as made and unchanged: a test that plans one fixture many times reuses it
        made.discard(target)
        target.mkdir(parents=True, exist_ok=True)
        if overrides:
            config = json.loads(source.read_text())
            config.update(overrides)
            (target / "config.json").write_text(json.dumps(config, indent=2))
        else:
            shutil.copyfile(source, target / "config.json")
        # The fixture's placeholder tokenizer: a plan refuses a model without one (tokenizer_missing).
        shutil.copyfile(source.with_name("tokenizer.json"), target / "tokenizer.json")
        if not overrides:
            made.add(target)
        return target

    return make


def plan_for(target: str, **fields: Any) -> BuildPlan:
    """The plan ``lmi-build plan <target>`` makes of these PlanRequest fields (env={} unless given)."""
    from lmi_build.planner.make import plan_request
    from lmi_build.targets import get_target, request_for

    env = fields.pop("env", {})
    return plan_request(request_for(target, fields, env=env), get_target(target)).plan


@pytest.fixture
def plan_model(model_dir: ModelDirFactory) -> Planner:
    """``plan_model(target, fixture_name_or_dir, **PlanRequest fields)`` -> BuildPlan (env={})."""

    def run(target: str, model: str | Path, **fields: Any) -> BuildPlan:
        path = model if isinstance(model, Path) else model_dir(model)
        return plan_for(target, model=str(path), **fields)

    return run


def fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURE_CONFIGS.iterdir() if (p / "config.json").is_file())


def codes(plan: BuildPlan) -> set[str]:
    return {m.code for m in plan.errors}


def warning_codes(plan: BuildPlan) -> set[str]:
    return {m.code for m in plan.warnings}


def valid_unless_unbuilt(plan: BuildPlan) -> bool:
    """The plan is valid, or refused only because lmi-build does not build that release's artifact
    (``neuron_unbuilt``: 0.26's split layout): the release's other rules, which a test checks, still ran."""
    return plan.valid or {m.code for m in plan.errors} == {"neuron_unbuilt"}
