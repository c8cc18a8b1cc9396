"""option.speculative_draft_model (issue 21 finding 11): DJL calls enable_speculative_decoder before
loading the target's NEFFs and loads the draft as a second model; lmi-build's compile driver does
neither, so the plan refuses the option with the cited reason on every release, instead of building
NEFFs the container would not find (and doubling -O in the flags)."""

from __future__ import annotations

import inspect

import pytest

from lmi_build.targets.neuronx import driver
from lmi_build.targets.neuronx.profiles import load_profiles
from lmi_build.targets.neuronx.sdk import sdk
from tests.fixtures_planning import Planner, codes

KEY = "option.speculative_draft_model"


@pytest.mark.parametrize("profile", [p.name for p in load_profiles()])
def test_speculative_draft_model_is_refused_with_its_reason(plan_model: Planner, profile: str) -> None:
    plan = plan_model("neuronx", "meta-llama--Llama-2-7b-hf", profile=profile, n_positions="1024",
                      option=(f"{KEY}=s3://bucket/draft/",))
    assert not plan.valid and "neuron_refused_option" in codes(plan)
    message = next(e.message for e in plan.errors if e.code == "neuron_refused_option")
    assert "enable_speculative_decoder" in message and "model_loader.py:382-387" in message


def test_the_reason_still_holds_for_the_driver() -> None:
    """Refused because the driver does not do it: the day it does, this test says to drop the refusal."""
    assert "enable_speculative_decoder" not in inspect.getsource(driver)
    assert KEY in sdk().refused_options
