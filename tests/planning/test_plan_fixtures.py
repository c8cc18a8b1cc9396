"""Every fixture config, planned for every target its recipe claims: valid, or an expected error
with the reason written next to it."""

from __future__ import annotations

import pytest

from lmi_build.model.normalize import read_spec_file
from lmi_build.recipes.registry import load_recipes
from tests.conftest import FIXTURE_CONFIGS
from tests.fixtures_planning import Planner, codes, fixture_names

# (fixture, target) -> error codes with the LMI defaults (max_input_len 1024 + max_output_len 512).
# GPT-2's 1024 positions do not hold the default 1024 + 512: defaults are fitted to the model with a
# warning (issue 10), so that plan is valid; user-set lengths that do not fit stay errors (FIXES shows
# the invalid user choice and the valid one).
EXPECTED_ERRORS: dict[tuple[str, str], set[str]] = {
    # T5 needs an encoder and a decoder engine; lmi-build refuses it rather than build one wrong engine.
    ("google--flan-t5-large", "trtllm"): {"trtllm_route"},
}
# Flags that make an otherwise-invalid fixture plan valid.
FIXES: dict[tuple[str, str], dict[str, object]] = {}
# User-set flags that make a valid fixture plan invalid, and the codes.
USER_ERRORS: dict[tuple[str, str], tuple[dict[str, object], set[str]]] = {
    ("openai-community--gpt2", "trtllm"): ({"max_input_len": 1024, "max_output_len": 512}, {"max_len_positions"}),
}


def _cases() -> list[tuple[str, str]]:
    book = load_recipes()
    cases: list[tuple[str, str]] = []
    for name in fixture_names():
        recipe = book.match(read_spec_file(FIXTURE_CONFIGS / name))
        cases += [(name, target) for target in recipe.targets]
    return cases


CASES = _cases()


def test_every_fixture_has_a_recipe_and_a_target() -> None:
    assert len({name for name, _ in CASES}) == len(fixture_names()) >= 22
    assert {"trtllm", "neuronx", "hf"} == {target for _, target in CASES}


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_fixture_plans(plan_model: Planner, name: str, target: str) -> None:
    plan = plan_model(target, name, trust_remote_code=True)
    expected = EXPECTED_ERRORS.get((name, target), set())
    assert codes(plan) == expected, plan.errors
    assert plan.valid is (not expected)
    assert plan.build is not None and plan.memory is not None
    assert plan.memory.weight_bytes > 0 and plan.memory.kv_bytes_per_token > 0
    assert plan.options["option.tensor_parallel_degree"] == "1"
    json_out = plan.to_json()
    assert {"target", "recipe", "valid", "errors", "warnings", "options", "memory", "cache_key"} <= set(json_out)
    assert "raw" not in json_out["spec"]
    if (name, target) in FIXES:
        fixed = plan_model(target, name, trust_remote_code=True, **FIXES[(name, target)])
        assert fixed.valid, fixed.errors
    if (name, target) in USER_ERRORS:
        flags, errors = USER_ERRORS[(name, target)]
        assert codes(plan_model(target, name, trust_remote_code=True, **flags)) == errors


@pytest.mark.parametrize("name", ["tiiuae--falcon-7b", "Qwen--Qwen-7B", "THUDM--chatglm2-6b",
                                  "baichuan-inc--Baichuan2-13B-Chat", "replit--replit-code-v1_5-3b"])
def test_remote_code_fixtures_need_trust(plan_model: Planner, name: str) -> None:
    assert "remote_code" in codes(plan_model("hf", name))
