"""Issue 22, Deliver 2: the configs of today's models (tests/fixtures/hf-configs) planned against every
TensorRT-LLM profile. Each plan is either valid, with vendor commands the version's tools take, or refused
in one line that names why: the first TensorRT-LLM release / LMI profile that has the family
(targets/trtllm/data/since.toml), or the recipe's cited reason there is no route (recipes/*.toml
[unsupported]). Every plan goes through the real planner; the commands through the real generator.

The 0.7.1 build.py argv is checked against tests/vendor/trtllm/converter_flags.json (read from the
vendor's own argparse, not from lmi-build's flags.toml); trtllm-build argv against the version's flag
table (TensorRT-LLM's own trtllm-build has no vendor extract in tests/vendor yet)."""

from __future__ import annotations

from typing import Any

import pytest

from lmi_build.targets.trtllm.flags import flag_table
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.steps import plan_steps
from tests.targets.trtllm.test_trtllm_converters import assert_vendor_accepts

QWEN25 = "Qwen--Qwen2.5-7B-Instruct"
LLAMA31 = "meta-llama--Llama-3.1-8B-Instruct"
PHI3 = "microsoft--Phi-3-mini-4k-instruct"
GEMMA2 = "google--gemma-2-9b"
MIXTRAL = "mistralai--Mixtral-8x7B-v0.1"
TODAY = [QWEN25, LLAMA31, PHI3, GEMMA2, MIXTRAL]
PROFILES = [profile.name for profile in load_profiles()]
BEFORE_0_12 = {"lmi-0.26.0-trtllm-0.7.1", "lmi-0.27.0-trtllm-0.8.0", "lmi-0.28.0-trtllm-0.9.0",
               "lmi-0.29.0-trtllm-0.11.0"}

# What each model gets on each profile: "valid", or the refusal's code and the words it must name.
REFUSED_BEFORE_0_12 = {
    QWEN25: ("architecture_version", ("Qwen2ForCausalLM", "TensorRT-LLM 0.12.0 or newer", "lmi-0.30.0-trtllm-0.12.0")),
    LLAMA31: ("rope_scaling_version", ("llama3", "TensorRT-LLM 0.12.0 or newer", "lmi-0.30.0-trtllm-0.12.0")),
}
REFUSED_EVERYWHERE = {
    PHI3: ("architecture_unsupported", ("Phi3ForCausalLM", "ModelOpt 0.47 cannot export phi3", "tensorrt_llm_utils.py")),
    GEMMA2: ("architecture_unsupported", ("Gemma2ForCausalLM", "ModelOpt 0.47 cannot export gemma2", "tensorrt_llm_utils.py")),
}


def expected(model: str, profile: str) -> tuple[str, tuple[str, ...]] | None:
    """None: the plan is valid; else (error code, words the one-line message names)."""
    if model in REFUSED_EVERYWHERE:
        return REFUSED_EVERYWHERE[model]
    if model in REFUSED_BEFORE_0_12 and profile in BEFORE_0_12:
        return REFUSED_BEFORE_0_12[model]
    return None


def _tp(model: str) -> str:
    return "2" if model == MIXTRAL else "1"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model", TODAY)
def test_todays_model_is_valid_with_accepted_commands_or_refused_naming_why(model: str, profile: str,
                                                                             plan_model: Any) -> None:
    plan = plan_model("trtllm", model, profile=profile, tp=_tp(model))
    refusal = expected(model, profile)
    if refusal is not None:
        code, words = refusal
        assert not plan.valid
        assert [error.code for error in plan.errors] == [code], plan.errors
        message = plan.errors[0].message
        assert "\n" not in message
        for word in words:
            assert word in message, (word, message)
        return

    assert plan.valid, plan.errors
    found = get_profile(profile)
    table = flag_table(found.tensorrt_llm)
    steps = plan_steps(plan, found).steps
    assert steps, "a valid plan has vendor steps"
    for step in steps:
        argv = step.argv
        if argv[0] == "trtllm-build":
            assert table.validate_argv("trtllm_build", argv[1:]) == [], (profile, argv)
        elif argv[:2] == ["python3", "{examples}/llama/build.py"]:
            flags = assert_vendor_accepts(argv, "legacy llama build.py (0.7-era stored copy)")
            assert flags["model_dir"], argv
    assert any(step.argv[0] in ("trtllm-build", "python3") for step in steps)


def test_qwen2_builds_with_its_own_checkpoint_architecture(plan_model: Any) -> None:
    """ModelOpt writes architectures[0] (model_config_export.py:155), which trtllm-build looks up."""
    plan = plan_model("trtllm", QWEN25, profile="lmi-0.30.0-trtllm-0.12.0", tp="1")
    assert plan.valid, plan.errors
    assert plan.recipe == "qwen2"
    build = plan.knobs(TrtllmBuild)
    assert build.trtllm_architecture == "Qwen2ForCausalLM"
    assert build.checkpoint_route == "modelopt" and build.checkpoint_writer == "stream"


@pytest.mark.parametrize("model", [PHI3, GEMMA2])
def test_phi3_and_gemma2_still_plan_for_the_hf_target(model: str, plan_model: Any) -> None:
    plan = plan_model("hf", model, profile="lmi-0.35.0-vllm-0.11.1", tp="1")
    assert plan.valid, plan.errors
