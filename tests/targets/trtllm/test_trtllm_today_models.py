"""Issue 22, Deliver 2: the configs of today's models (tests/fixtures/hf-configs) planned against every
TensorRT-LLM profile. Each plan is either valid, with vendor commands the version's tools take, or refused
in one line that names why: the first TensorRT-LLM release / LMI profile that has the family
(targets/trtllm/data/since.toml, read from each release's MODEL_MAP and converters), or the recipe's cited
reason there is no route (recipes/*.toml [unsupported]). Every plan goes through the real planner; the
commands through the real generator.

Vendor commands are checked against the release's own argparse as extracted into tests/vendor/trtllm
(script_flags.json per release and script, converter_flags.json's hand-read copies where no tree was read,
converter_flags.json's 0.7-era build.py), through the stand-ins' vendor_argparse, never lmi-build's
flags.toml; trtllm-build against build_flags.json where the release was extracted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.versions import release
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.steps import plan_steps
from tests.paths import STANDINS_DIR
from tests.targets.trtllm.test_trtllm_converters import assert_vendor_accepts

sys.path.insert(0, str(STANDINS_DIR))

from vendor_argparse import check, check_flags, missing_reason, script_flags

QWEN25 = "Qwen--Qwen2.5-7B-Instruct"
LLAMA31 = "meta-llama--Llama-3.1-8B-Instruct"
PHI3 = "microsoft--Phi-3-mini-4k-instruct"
GEMMA2 = "google--gemma-2-9b"
MIXTRAL = "mistralai--Mixtral-8x7B-v0.1"
QWEN_MOE = "Qwen--Qwen1.5-MoE-A2.7B-Chat"
DEEPSEEK_V2 = "deepseek-ai--DeepSeek-V2-Lite"
TODAY = [QWEN25, LLAMA31, PHI3, GEMMA2, MIXTRAL, QWEN_MOE, DEEPSEEK_V2]
PROFILES = [profile.name for profile in load_profiles()]

# Per model: the oldest profile that builds it, and below it the refusal's code and the words it names
# (the family, the first TensorRT-LLM release that has it, the oldest profile with that release).
FIRST: dict[str, tuple[str, str, tuple[str, ...]]] = {
    MIXTRAL: ("lmi-0.26.0-trtllm-0.7.1", "", ()),
    QWEN25: ("lmi-0.29.0-trtllm-0.11.0", "architecture_version",
             ("Qwen2ForCausalLM", "TensorRT-LLM 0.10.0 or newer", "lmi-0.29.0-trtllm-0.11.0")),
    LLAMA31: ("lmi-0.30.0-trtllm-0.12.0", "rope_scaling_version",
              ("llama3", "TensorRT-LLM 0.12.0 or newer", "lmi-0.30.0-trtllm-0.12.0")),
    PHI3: ("lmi-0.29.0-trtllm-0.11.0", "architecture_version",
           ("Phi3ForCausalLM", "TensorRT-LLM 0.10.0 or newer", "lmi-0.29.0-trtllm-0.11.0")),
    QWEN_MOE: ("lmi-0.29.0-trtllm-0.11.0", "architecture_version",
               ("Qwen2MoeForCausalLM", "TensorRT-LLM 0.11.0 or newer", "lmi-0.29.0-trtllm-0.11.0")),
    GEMMA2: ("lmi-0.33.0-trtllm-0.21.0", "architecture_version",
             ("Gemma2ForCausalLM", "TensorRT-LLM 0.13.0 or newer", "lmi-0.33.0-trtllm-0.21.0")),
    DEEPSEEK_V2: ("lmi-0.33.0-trtllm-0.21.0", "architecture_version",
                  ("DeepseekV2ForCausalLM", "TensorRT-LLM 0.15.0 or newer", "lmi-0.33.0-trtllm-0.21.0")),
}
# The route each family takes where it builds: ModelOpt on the host, or the release's own converter
# (examples/<dir>/convert_checkpoint.py; ModelOpt 0.47 cannot export phi3, gemma2, deepseek, and its qwen
# export lacks Qwen2-MoE's qwen_type and expert sizes: recipes/*.toml). Qwen2 converts with examples/qwen on
# 0.11, whose MODEL_MAP lacks the Qwen2ForCausalLM ModelOpt writes (since.toml written_as).
ROUTES = {MIXTRAL: "modelopt", QWEN25: "modelopt", LLAMA31: "modelopt", PHI3: "vendor", QWEN_MOE: "vendor",
          GEMMA2: "vendor", DEEPSEEK_V2: "vendor"}
ROUTES_ON = {(QWEN25, "lmi-0.29.0-trtllm-0.11.0"): "vendor"}


def _version(profile: str) -> str:
    return get_profile(profile).tensorrt_llm


def expected(model: str, profile: str) -> tuple[str, tuple[str, ...]] | None:
    """None: the plan is valid; else (error code, words the one-line message names)."""
    first, code, words = FIRST[model]
    if release(_version(profile)) < release(_version(first)):
        return code, words
    return None


def _tp(model: str) -> str:
    return "2" if model == MIXTRAL else "1"


def _vendor_problem(version: str, argv: list[str]) -> str | None:
    """What the release's own argparse says of a vendor argv (None: accepted, or no extract covers it)."""
    argv = [token.replace("{workers}", "1") for token in argv]
    if argv[0] == "trtllm-build":
        return check(version, argv[1:]) if missing_reason(version) is None else None
    script = "examples/" + argv[1].removeprefix("{examples}/")
    flags, _source = script_flags(version, script)
    return None if flags is None else check_flags(flags, argv[2:], Path(script).name)


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
    assert plan.knobs(TrtllmBuild).checkpoint_route == ROUTES_ON.get((model, profile), ROUTES[model])
    version = _version(profile)
    steps = plan_steps(plan, get_profile(profile)).steps
    assert steps, "a valid plan has vendor steps"
    for step in steps:
        argv = step.argv
        if argv[:2] == ["python3", "{examples}/llama/build.py"]:
            flags = assert_vendor_accepts(argv, "legacy llama build.py (0.7-era stored copy)")
            assert flags["model_dir"], argv
        elif argv[0] == "trtllm-build" or argv[1].startswith("{examples}/"):
            assert _vendor_problem(version, argv) is None, (profile, argv, _vendor_problem(version, argv))
    assert any(step.argv[0] in ("trtllm-build", "python3") for step in steps)


def test_qwen2_builds_with_its_own_checkpoint_architecture(plan_model: Any) -> None:
    """ModelOpt writes architectures[0] (model_config_export.py:155), which trtllm-build looks up."""
    plan = plan_model("trtllm", QWEN25, profile="lmi-0.30.0-trtllm-0.12.0", tp="1")
    assert plan.valid, plan.errors
    assert plan.recipe == "qwen2"
    build = plan.knobs(TrtllmBuild)
    assert build.trtllm_architecture == "Qwen2ForCausalLM"
    assert build.checkpoint_route == "modelopt" and build.checkpoint_writer == "stream"


@pytest.mark.parametrize("model", [PHI3, GEMMA2, QWEN_MOE, DEEPSEEK_V2])
def test_todays_converter_families_plan_for_the_hf_target(model: str, plan_model: Any) -> None:
    plan = plan_model("hf", model, profile="lmi-0.35.0-vllm-0.11.1", tp="1")
    assert plan.valid, plan.errors


def test_qwen2_converts_with_the_qwen_converter_where_model_map_lacks_qwen2(plan_model: Any) -> None:
    """0.11's MODEL_MAP has no Qwen2ForCausalLM (the architecture ModelOpt writes), and its examples/qwen
    converter takes model_type qwen2, writing QWenForCausalLM (models/qwen/convert.py @9691e12b:1175-1198)."""
    plan = plan_model("trtllm", QWEN25, profile="lmi-0.29.0-trtllm-0.11.0", tp="1")
    assert plan.valid, plan.errors
    build = plan.knobs(TrtllmBuild)
    assert (build.checkpoint_route, build.trtllm_architecture) == ("vendor", "QWenForCausalLM")
    argv = plan_steps(plan, get_profile("lmi-0.29.0-trtllm-0.11.0")).steps[0].argv
    assert argv[1] == "{examples}/qwen/convert_checkpoint.py"
    assert _vendor_problem("0.11.0", argv) is None


@pytest.mark.parametrize(("profile", "written"), [("lmi-0.29.0-trtllm-0.11.0", "QWenForCausalLM"),
                                                   ("lmi-0.30.0-trtllm-0.12.0", "Qwen2MoeForCausalLM"),
                                                   ("lmi-0.33.0-trtllm-0.21.0", "Qwen2MoeForCausalLM")])
def test_qwen2_moe_expects_the_architecture_its_release_converter_writes(profile: str, written: str, plan_model: Any,
                                                                         tmp_path: Path) -> None:
    """0.11's examples/qwen converter writes QWenForCausalLM (models/qwen/convert.py @9691e12b:1198), 0.12's
    architectures[0] (models/qwen/config.py @a681853d:127): a --checkpoint it wrote is this plan's."""
    import json

    from lmi_build.core.errors import SourceError
    from lmi_build.targets.trtllm.build import check_checkpoint

    plan = plan_model("trtllm", QWEN_MOE, profile=profile, tp="1")
    assert plan.valid, plan.errors
    build = plan.knobs(TrtllmBuild)
    assert (build.checkpoint_route, build.trtllm_example, build.trtllm_architecture) == ("vendor", "qwen", written)
    config = {"architecture": written, "dtype": build.dtype, "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
              "quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    check_checkpoint(tmp_path, plan)
    other = "Qwen2MoeForCausalLM" if written == "QWenForCausalLM" else "QWenForCausalLM"
    (tmp_path / "config.json").write_text(json.dumps({**config, "architecture": other}))
    with pytest.raises(SourceError, match=f"architecture {other}"):
        check_checkpoint(tmp_path, plan)


def test_gemma2_converts_with_gemmas_own_spelling_and_tensor_parallelism_only(plan_model: Any) -> None:
    """examples/gemma/convert_checkpoint.py takes --ckpt-type/--model-dir/--output-model-dir/--world-size
    (flags.toml spellings.gemma): the generated argv is one the extracted 0.12 argparse of that script and
    the hand-read models/core copy (310decb9) accept; pp > 1 is refused, as the converter maps pp_size=1."""
    profile = "lmi-0.33.0-trtllm-0.21.0"
    plan = plan_model("trtllm", GEMMA2, profile=profile, tp="2")
    assert plan.valid, plan.errors
    argv = plan_steps(plan, get_profile(profile)).steps[0].argv
    assert argv[:4] == ["python3", "{examples}/models/core/gemma/convert_checkpoint.py", "--ckpt-type", "hf"]
    assert argv[argv.index("--world-size") + 1] == "2" and "--tp_size" not in argv and "--pp_size" not in argv
    flags, _source = script_flags("0.12.0", "examples/gemma/convert_checkpoint.py")
    assert flags is not None and check_flags(flags, argv[2:], "convert_checkpoint.py") is None
    assert _vendor_problem("0.21.0rc1", argv) is None

    piped = plan_model("trtllm", GEMMA2, profile=profile, tp="2", pp=2)
    assert not piped.valid
    assert [e.code for e in piped.errors] == ["trtllm_route"]
    assert "tensor parallelism only" in piped.errors[0].message


@pytest.mark.parametrize("profile", ["lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0"])
def test_deepseek_v2_converts_with_the_contrib_converter(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", DEEPSEEK_V2, profile=profile, tp="2")
    assert plan.valid, plan.errors
    argv = plan_steps(plan, get_profile(profile)).steps[0].argv
    assert argv[1] == "{examples}/models/contrib/deepseek_v2/convert_checkpoint.py"
    assert argv[argv.index("--tp_size") + 1] == "2"
    assert _vendor_problem(get_profile(profile).tensorrt_llm, argv) is None
