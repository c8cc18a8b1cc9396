"""RoPE scaling per LMI Neuron release (issue 21 finding 8): Llama-3.x's llama3 rope_scaling is
refused on 0.26-0.28 (the image's transformers 4.35/4.36 LlamaConfig cannot parse it); linear scaling
(deepseek-coder, CodeLlama-style fine-tunes) is refused on 0.26-0.28 (TNX 0.9/0.10 never read rope_scaling:
unscaled RoPE, wrong outputs) and on 0.30-0.34 (TNX 0.12/0.13 raise ValueError); llama3 plans on 0.30+ and is
refused on 0.29, whose TNX 0.11.351 ignores it (issue 42 item 8: the Neuron release notes name 0.12.313 the first
with scaled RoPE), naming 0.30 as the first release that scales it."""

from __future__ import annotations

from typing import Any

import pytest

from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.rope import transformers_parses
from tests.fixtures_planning import ModelDirFactory, Planner, codes, warning_codes

LLAMA = "meta-llama--Llama-2-7b-hf"
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
          "rope_type": "llama3"}
LINEAR = {"type": "linear", "factor": 4.0}  # deepseek-ai/deepseek-coder-6.7b-base config.json
P026, P027, P028, P029 = ("lmi-0.26.0-neuronx-sdk2.16.0", "lmi-0.27.0-neuronx-sdk2.18.0",
                          "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.29.0-neuronx-sdk2.19.1")
P030, P032, P033, P034 = ("lmi-0.30.0-neuronx-sdk2.20.1", "lmi-0.32.0-neuronx-sdk2.21.1",
                          "lmi-0.33.0-neuronx-sdk2.21.1", "lmi-0.34.0-neuronx-sdk2.21.1")


def _plan(plan_model: Planner, model_dir: ModelDirFactory, name: str, scaling: dict[str, Any], profile: str) -> Any:
    path = model_dir(LLAMA, dirname=f"llama-{name}", rope_scaling=scaling, max_position_embeddings=131072)
    return plan_model("neuronx", path, profile=profile, n_positions="1024")


@pytest.mark.parametrize("profile", [P026, P027, P028])
def test_llama3_scaling_is_refused_where_transformers_cannot_parse_it(plan_model: Planner, model_dir: ModelDirFactory,
                                                                      profile: str) -> None:
    plan = _plan(plan_model, model_dir, "llama3", LLAMA3, profile)
    error = next(e for e in plan.errors if e.code == "neuron_rope_scaling")
    assert "transformers cannot read this config" in error.message and "two fields" in error.message
    # One line naming where its sources are (issue 42: a kilobyte of citations was one error line), cited there.
    assert f"(sources: lmi-build profiles show {profile}, rope_scaling_sources)" in error.message
    assert len(error.message) < 400 and "configuration_llama.py" in " ".join(get_profile(profile).rope_scaling_sources)


@pytest.mark.parametrize("scaling", [LLAMA3, LINEAR], ids=["llama3", "linear"])
def test_029_ignores_rope_scaling_an_error_naming_the_first_release_that_scales(
        plan_model: Planner, model_dir: ModelDirFactory, scaling: dict[str, Any]) -> None:
    """transformers-neuronx 0.11.351 (0.29) reads no rope_scaling: Llama-3.1 would be served with unscaled
    RoPE. Refused, with the release notes cited and the first release that scales named in the hint."""
    kind = str(scaling.get("rope_type") or scaling["type"])
    plan = _plan(plan_model, model_dir, kind, scaling, P029)
    error = next(e for e in plan.errors if e.code == "neuron_rope_scaling")
    assert "unscaled RoPE" in error.message and "0.11.351" in error.message
    assert "Scaled RoPE for LLAMA 3.1" in " ".join(get_profile(P029).rope_scaling_sources)  # the release notes
    assert "neuron_rope_scaling_unchecked" not in warning_codes(plan)
    if kind == "llama3":
        assert error.hint.startswith(f"pick {P030} or newer, the first release") and "llama3" in error.hint
    else:  # no release applies linear scaling (0.30+ refuse it): no release to pick
        assert "no LMI Neuron release applies llama's linear" in error.hint and "GPU target" in error.hint


@pytest.mark.parametrize("profile", [P026, P027, P028])
def test_linear_scaling_is_ignored_before_029(plan_model: Planner, model_dir: ModelDirFactory, profile: str) -> None:
    plan = _plan(plan_model, model_dir, "linear", LINEAR, profile)
    assert "neuron_rope_scaling" in codes(plan)
    assert "unscaled RoPE" in next(e.message for e in plan.errors if e.code == "neuron_rope_scaling")


@pytest.mark.parametrize("profile", [P030, P032, P033, P034])
def test_030_to_034_refuse_linear_and_load_llama3(plan_model: Planner, model_dir: ModelDirFactory,
                                                   profile: str) -> None:
    refused = _plan(plan_model, model_dir, "linear", LINEAR, profile)
    error = next(e for e in refused.errors if e.code == "neuron_rope_scaling")
    assert "Only default and llama3" in error.message
    assert {"1ade6d7", "6c0b875"} & set(" ".join(get_profile(profile).rope_scaling_sources).split())
    loads = _plan(plan_model, model_dir, "llama3", LLAMA3, profile)
    assert loads.valid, [e.message for e in loads.errors]
    assert "neuron_rope_scaling_unchecked" not in warning_codes(loads)


def test_no_scaling_plans_on_every_release(plan_model: Planner) -> None:
    for profile in load_profiles():
        plan = plan_model("neuronx", LLAMA, profile=profile.name, n_positions="1024")
        assert "neuron_rope_scaling" not in codes(plan) and "neuron_rope_scaling_unchecked" not in warning_codes(plan)


def test_other_model_types_ignore_rope_scaling_even_on_032(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    path = model_dir("mistralai--Mistral-7B-v0.1", dirname="mistral-linear", rope_scaling=LINEAR)
    plan = plan_model("neuronx", path, profile=P032, n_positions="1024")
    assert "unscaled RoPE" in next(e.message for e in plan.errors if e.code == "neuron_rope_scaling")


def test_transformers_436_validation_as_written() -> None:
    """huggingface/transformers v4.36.2 configuration_llama.py:172-190, case by case."""
    parsed = ("linear", "dynamic")
    assert transformers_parses(None, parsed) is None
    assert transformers_parses({"type": "dynamic", "factor": 2.0}, parsed) is None
    assert transformers_parses({"type": "linear", "factor": 4}, parsed) is not None  # an int factor
    assert transformers_parses({"type": "linear", "factor": 4.0, "rope_type": "linear"}, parsed) is not None
    assert transformers_parses({"type": "yarn", "factor": 4.0}, parsed) is not None


def test_every_rule_is_cited() -> None:
    for profile in load_profiles():
        assert profile.rope_scaling_sources, profile.name
    assert all(profile.rope_scaling_checked for profile in load_profiles())  # 0.29 and 0.30 read (issue 42 item 8)
    assert "72825d50" in " ".join(get_profile(P029).rope_scaling_sources)  # the Neuron release notes
    assert "6c0b875" in " ".join(get_profile(P030).rope_scaling_sources)  # release-2.20, version.py 0.12.x
