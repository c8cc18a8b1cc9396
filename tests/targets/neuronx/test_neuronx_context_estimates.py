"""A given context_length_estimate under continuous batching, as each release checks it (issue 21
finding 10): 0.26-0.28 raise unless it is exactly [n_positions] (the list as parsed, in the given
order), 0.29 only with option.cache_layout=BSH, 0.30+ only when its first entry is not n_positions
with BSH (djl-serving <version>-dlc neuron_utils/model_loader.py, cited per profile)."""

from __future__ import annotations

import pytest

from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.profiles import NeuronProfile, load_profiles
from tests.fixtures_planning import Planner, codes, valid_unless_unbuilt

LLAMA = "meta-llama--Llama-2-7b-hf"
P028, P029, P030 = "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.29.0-neuronx-sdk2.19.1", "lmi-0.30.0-neuronx-sdk2.20.1"
ROLLING = {"n_positions": "2048", "max_batch_size": 4}  # llama, max_rolling_batch_size 4 > 1: continuous batching


def _plan(plan_model: Planner, profile: str, contexts: str, *option: str) -> BuildPlan:
    return plan_model("neuronx", LLAMA, profile=profile, context_length_estimate=contexts, option=option, **ROLLING)


def test_028_refuses_a_custom_estimate_under_continuous_batching(plan_model: Planner) -> None:
    plan = _plan(plan_model, P028, "512,2048")
    error = next(e for e in plan.errors if e.code == "context_length_estimate")
    assert "exactly [2048]" in error.message and "0.28.0-dlc" in error.message
    assert "model_loader.py:222-236" in error.message
    assert "context_length_estimate" not in codes(_plan(plan_model, P028, "2048"))


def test_the_list_is_compared_as_parsed(plan_model: Planner) -> None:
    assert "context_length_estimate" in codes(_plan(plan_model, P028, "2048,2048"))


def test_029_refuses_only_with_the_bsh_cache_layout(plan_model: Planner) -> None:
    assert "context_length_estimate" not in codes(_plan(plan_model, P029, "512,2048"))
    refused = _plan(plan_model, P029, "512,2048", "option.cache_layout=BSH")
    assert "context_length_estimate" in codes(refused)


def test_030_checks_the_first_entry_with_bsh(plan_model: Planner) -> None:
    assert "context_length_estimate" not in codes(_plan(plan_model, P030, "512,2048"))
    assert "context_length_estimate" in codes(
        _plan(plan_model, P030, "512,2048", "option.cache_layout=BSH"))
    plan = _plan(plan_model, P030, "2048,512", "option.cache_layout=BSH")
    assert "context_length_estimate" not in codes(plan)


def test_030_bsh_without_estimates_compiles_n_positions_only(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, profile=P030, option=("option.cache_layout=BSH",), **ROLLING)
    assert isinstance(plan.build, NeuronxBuild) and plan.build.context_length_estimate == (2048,)


@pytest.mark.parametrize("profile", load_profiles(), ids=lambda p: p.name)
def test_every_release_cites_its_rule(profile: NeuronProfile) -> None:
    assert profile.continuous_batching_contexts_sources


@pytest.mark.parametrize("profile", ["lmi-0.26.0-neuronx-sdk2.16.0", P030])
def test_a_bucket_above_n_positions_is_compiled_not_refused(plan_model: Planner, profile: str) -> None:
    """DJL's own 0.26 integration test (llama-7b-split) serves context buckets 256, 512, 1024 with
    n_positions 512: transformers-neuronx takes the list as given, so the plan keeps it and warns."""
    plan = plan_model("neuronx", LLAMA, profile=profile, n_positions="512", tp=4, context_length_estimate="256,512,1024",
                      option=("option.load_split_model=true", "option.rolling_batch=disable"))
    assert "context_length_estimate" not in codes(plan) and valid_unless_unbuilt(plan)
    warning = next(w for w in plan.warnings if w.code == "context_bucket_unused")
    assert "1024" in warning.message and "8b01968 src/transformers_neuronx/bucket.py:65-66" in warning.message
    if plan.build is not None:
        assert isinstance(plan.build, NeuronxBuild) and plan.build.context_length_estimate == (256, 512, 1024)
