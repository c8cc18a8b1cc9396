"""A saved plan is built only when it is the plan its own inputs make (issue 32 item 2).

The digest of a saved plan says it was not changed by accident, not that it was checked: an hf plan
edited to tp 3 on a model of 8 heads (digest and cache key recomputed) built and verified; the same
for trtllm died with an AssertionError traceback; a plan whose trust_remote_code default was turned
on carried the model's .py into the artifact; ``matrix`` built and cached such a plan. Now every
build of a saved plan plans its inputs again (``planner.recheck_saved_plan``) and refuses, with one
line, a plan that fails the checks or differs from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _plan(world: World, target: str, *flags: str) -> Path:
    result = world.run("plan", target, "--model", "./model", *flags, "--save", "plan.json")
    assert result.returncode == 0, result.stderr
    return world.cwd / "plan.json"


def _edit(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit the plan as a careful editor would: the cache key and the digest recomputed to match."""
    from lmi_build.planning.cache_key import plan_cache_key
    from lmi_build.planning.saved import DIGEST_FIELD, SavedPlan, content_digest
    from lmi_build.targets import PlanKnobs

    content = {key: value for key, value in json.loads(path.read_text()).items() if key != DIGEST_FIELD}
    edit(content)
    content["plan"]["cache_key"] = plan_cache_key(SavedPlan[PlanKnobs].model_validate(content).plan)
    content[DIGEST_FIELD] = content_digest(content)
    path.write_text(json.dumps(content, indent=2))


def _tp(value: int) -> Callable[[dict[str, Any]], None]:
    def edit(content: dict[str, Any]) -> None:
        content["plan"]["build"]["tp"] = value
        content["plan"]["options"]["option.tensor_parallel_degree"] = str(value)
    return edit


def _trust_remote_code(content: dict[str, Any]) -> None:
    content["plan"]["options"]["option.trust_remote_code"] = "true"


def _refused(world: World, *args: str, says: str) -> None:
    before = world.snapshot()
    result = world.run(*args)
    world.expect(result, code=2, before=before, says=says)


@pytest.mark.parametrize("target", ["hf", "trtllm"])
def test_a_plan_edited_to_tp3_on_8_heads_is_refused(world: World, target: str) -> None:
    path = _plan(world, target, "--tp", "2")
    _edit(path, _tp(3))
    _refused(world, target, "--plan", "plan.json", "--output", "out", "--no-cache",
             says="plan file plan.json does not pass the planner's checks")


def test_a_plan_whose_trust_remote_code_default_was_turned_on_is_refused(world: World) -> None:
    (world.model / "modeling_tiny.py").write_text("# the model's own code\n")
    path = _plan(world, "hf")
    assert json.loads(path.read_text())["plan"]["option_sources"]["option.trust_remote_code"] == "default"
    _edit(path, _trust_remote_code)
    _refused(world, "hf", "--plan", "plan.json", "--output", "out", "--no-cache",
             says="option.trust_remote_code is 'true' in the plan, 'false' when planned again")


def test_a_plan_as_saved_still_builds(world: World) -> None:
    _plan(world, "hf", "--tp", "2")
    before = world.snapshot()
    result = world.run("hf", "--plan", "plan.json", "--output", "out", "--no-cache")
    world.expect(result, code=0, before=before, allowed=("work/out",))


def test_matrix_refuses_an_edited_plan(world: World) -> None:
    path = _plan(world, "hf", "--tp", "2")
    _edit(path, _tp(3))
    (world.cwd / "builds.toml").write_text("[[build]]\nplan = 'plan.json'\nname = 'edited'\n", encoding="utf-8")
    before = world.snapshot()
    result = world.run("matrix", "builds.toml", "--cache", "s3://no-bucket/cache",
                       "--endpoint-url", "http://127.0.0.1:9")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "does not pass the planner's checks" in result.stderr, result.stderr[-2000:]
    assert world.snapshot() == before
