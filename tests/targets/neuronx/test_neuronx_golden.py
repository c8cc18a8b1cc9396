"""Every fixture config a neuronx recipe claims, planned for every Neuron profile; the compile
step's compile.json per profile x fixture and the llama build-neffs.sh per profile as golden files.
LMI_BUILD_UPDATE_GOLDEN=1 rewrites them for review (tests/golden.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmi_build.runners import ScriptRunner
from lmi_build.runners.bundle import bundle_script
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.steps import (
    SCRIPT_DEVICES,
    compile_spec,
    compile_step,
    neff_bundle,
    neuronx_paths,
)
from tests.fixtures_planning import Planner, fixture_names, valid_unless_unbuilt
from tests.golden import check_golden

NEURONX_RECIPES = {"bloom", "gpt2", "gpt_neox", "gptj", "llama", "mistral", "mixtral", "opt"}
# Fixtures a release refuses for a cited reason of its own (the test checks the reason, not a pass):
# Llama-3.1's llama3 RoPE scaling, which the transformers or transformers-neuronx of 0.26-0.29 cannot
# read or ignore (targets/neuronx/rope.py, profiles.toml rope_scaling_sources).
_LLAMA3_ROPE_REFUSED = {"lmi-0.26.0-neuronx-sdk2.16.0", "lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.28.0-neuronx-sdk2.18.2",
                        "lmi-0.29.0-neuronx-sdk2.19.1"}
ROPE_REFUSED = {"meta-llama--Llama-3.1-8B-Instruct": _LLAMA3_ROPE_REFUSED,
                "meta-llama--Llama-3.2-3B-Instruct": _LLAMA3_ROPE_REFUSED}
PROFILES = [p.name for p in load_profiles()]


def _golden(name: str, data: str) -> None:
    check_golden(f"neuronx/{name}", data)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_every_neuronx_fixture_plans_per_profile(profile_name: str, plan_model: Planner) -> None:
    profile = get_profile(profile_name)
    specs: dict[str, object] = {}
    for fixture in fixture_names():
        plan = plan_model("neuronx", fixture, tp="2", n_positions="1024", profile=profile_name)
        if plan.recipe not in NEURONX_RECIPES:
            continue
        if profile_name in ROPE_REFUSED.get(fixture, ()):
            assert not plan.valid and all("RoPE" in e.message or "rope_scaling" in e.message
                                          for e in plan.errors if e.code != "neuron_unbuilt"), \
                (fixture, [e.message for e in plan.errors])
            continue
        assert valid_unless_unbuilt(plan), (fixture, [e.message for e in plan.errors])
        assert plan.toolchain.profile == profile_name
        assert plan.toolchain.versions["neuronx_cc"] == profile.neuronx_cc
        specs[fixture] = compile_spec(plan, profile)
    assert {spec["loader"] for spec in specs.values()} <= {"tnx", "optimum"}  # type: ignore[index]
    assert len(specs) >= len(NEURONX_RECIPES)
    _golden(f"{profile_name}.compile.json", json.dumps(specs, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("profile_name", [p.name for p in load_profiles() if not p.split_layout_unbuilt])
def test_golden_bundle_script(profile_name: str, plan_model: Planner) -> None:
    profile = get_profile(profile_name)
    plan = plan_model("neuronx", "meta-llama--Llama-2-7b-hf", tp="2", n_positions="4096",
                      context_length_estimate="256,512,1024,2048", profile=profile_name)
    runner = ScriptRunner(image=profile.image or None, devices=SCRIPT_DEVICES)
    paths = neuronx_paths(driver=Path("driver"), model=Path("model"), compiled=Path("compiled"),
                          cache=Path("neuron-cache"))
    runner.run(compile_step("python3"), paths, Path("."), plan)
    spec = neff_bundle(runner.image, header=f"profile {profile.name}", profile=profile)
    _golden(f"{profile_name}.build-neffs.sh", bundle_script(runner, spec, paths))
