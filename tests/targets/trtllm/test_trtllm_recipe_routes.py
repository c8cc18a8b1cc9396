"""`recipes list --profile`'s answer for trtllm (targets/trtllm/routes.py) is the planner's: for every
fixture config (tests/fixtures/hf-configs) on every TensorRT-LLM profile, a plan is valid exactly where
the recipe's route says it builds, and a refused recipe's reason is the plan's own refusal, word for
word, where both come from the family's first release (since.toml). Model-specific refusals (a RoPE
type the release cannot read: rope_scaling_version) are the plan's alone, so those plans are skipped."""

from __future__ import annotations

from typing import Any

import pytest

from lmi_build.model.normalize import read_spec_file
from lmi_build.planning.target_api import route_for
from lmi_build.recipes.registry import load_recipes
from lmi_build.targets import get_target
from lmi_build.targets.trtllm.profiles import load_profiles
from tests.conftest import FIXTURE_CONFIGS
from tests.fixtures_planning import fixture_names

PROFILES = [profile.name for profile in load_profiles()]
MODEL_SPECIFIC = {"rope_scaling_version"}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_fixture_plan_agrees_with_its_recipes_route(profile: str, plan_model: Any) -> None:
    target = get_target("trtllm")
    book = load_recipes()
    checked = {True: 0, False: 0}
    for fixture in fixture_names():
        recipe = book.match(read_spec_file(FIXTURE_CONFIGS / fixture))
        route = route_for(target, recipe, profile)
        plan = plan_model("trtllm", fixture, profile=profile, tp="1", trust_remote_code=True)
        codes = {error.code for error in plan.errors}
        if codes & MODEL_SPECIFIC:
            assert route.builds, (fixture, route)
            continue
        assert plan.valid is route.builds, (fixture, profile, route, plan.errors)
        checked[route.builds] += 1
        if route.builds:
            assert route.route and route.reason is None
        else:
            assert route.reason and route.route is None
            if "architecture_version" in codes:
                assert route.reason == plan.errors[0].message, (fixture, route.reason, plan.errors[0].message)
            elif "architecture_unsupported" in codes:
                assert route.reason in plan.errors[0].message or "has no trtllm route" in route.reason
    assert checked[True] and checked[False], checked


def test_a_family_older_releases_lack_names_its_first_release_and_profile() -> None:
    target = get_target("trtllm")
    book = load_recipes()
    expected = {"phi3": "lmi-0.29.0-trtllm-0.11.0", "qwen2_moe": "lmi-0.29.0-trtllm-0.11.0",
                "qwen2": "lmi-0.29.0-trtllm-0.11.0", "gemma2": "lmi-0.33.0-trtllm-0.21.0",
                "deepseek_v2": "lmi-0.33.0-trtllm-0.21.0"}
    order = PROFILES  # oldest TensorRT-LLM first
    for name, first in expected.items():
        recipe = book.get(name)
        builds = [profile for profile in order if route_for(target, recipe, profile).builds]
        assert builds[0] == first, (name, builds)
        refused = [profile for profile in order if profile not in builds]
        assert refused and all(f"profile {first} is the oldest that has it" in (route_for(target, recipe, p).reason or "")
                               for p in refused), name


def test_qwen2s_route_is_the_release_converter_until_model_map_has_it() -> None:
    target = get_target("trtllm")
    recipe = load_recipes().get("qwen2")
    assert "examples/qwen/convert_checkpoint.py" in (route_for(target, recipe, "lmi-0.29.0-trtllm-0.11.0").route or "")
    assert "ModelOpt" in (route_for(target, recipe, "lmi-0.30.0-trtllm-0.12.0").route or "")
