"""Issue 22 findings 5 and 4: the checkpoint route each TensorRT-LLM release really offers per family.
GPT-2 has no convert_checkpoint.py + trtllm-build route on 0.8 (refused, naming the first release
with it) and takes ``--gpt_variant`` from 0.9 on; Falcon and ChatGLM, whose TensorRT-LLM export
ModelOpt refuses, convert with the release's own examples/<family>/convert_checkpoint.py.

Generated converter commands are checked against tests/vendor/trtllm/converter_flags.json: flag lists
read from TensorRT-LLM's own parse_arguments, never from lmi-build's flags.toml. Every plan goes through
the real planner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps
from tests.paths import STANDINS_DIR, VENDOR_DIR

VENDOR = json.loads((VENDOR_DIR / "trtllm" / "converter_flags.json").read_text())["converters"]
GPT2 = "openai-community--gpt2"
CHATGLM2 = "THUDM--chatglm2-6b"
FALCON = ("tiiuae--falcon-7b", "tiiuae--falcon-40b")
CHECKPOINT_PROFILES = ["lmi-0.27.0-trtllm-0.8.0", "lmi-0.28.0-trtllm-0.9.0", "lmi-0.29.0-trtllm-0.11.0",
                       "lmi-0.30.0-trtllm-0.12.0", "lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0"]
# The vendor entry whose flags stand for each profile's converter (converter_flags.json "tags").
GPT_CONVERTER = {"lmi-0.28.0-trtllm-0.9.0": "gpt@9bd15f19", "lmi-0.29.0-trtllm-0.11.0": "gpt@9bd15f19",
                 "lmi-0.30.0-trtllm-0.12.0": "gpt@9bd15f19", "lmi-0.33.0-trtllm-0.21.0": "models/core/gpt@7edbcccb",
                 "djl-nightly-trtllm-1.0.0": "models/core/gpt@7edbcccb"}
CHATGLM_CONVERTER = {"lmi-0.27.0-trtllm-0.8.0": "chatglm@5955b8af", "lmi-0.28.0-trtllm-0.9.0": "chatglm@250d9c29", "lmi-0.29.0-trtllm-0.11.0": "chatglm@250d9c29",
                     "lmi-0.30.0-trtllm-0.12.0": "chatglm@250d9c29",
                     "lmi-0.33.0-trtllm-0.21.0": "models/core/glm-4-9b@10c1d594",
                     "djl-nightly-trtllm-1.0.0": "models/core/glm-4-9b@10c1d594"}


def _parsed(argv: list[str]) -> dict[str, str]:
    """argparse's view of a ``python3 X.py --flag value ...`` argv: flag -> value ("" for a switch)."""
    flags: dict[str, str] = {}
    for index, token in enumerate(argv[2:], start=2):
        if token.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else ""
            flags[token[2:]] = "" if following.startswith("--") else following
    return flags


def assert_vendor_accepts(argv: list[str], converter: str) -> dict[str, str]:
    """The vendor's own parse_arguments would take ``argv``: its script path, known flags, valid choices."""
    entry = VENDOR[converter]
    assert argv[1] == "{examples}/" + entry["path"].removeprefix("examples/"), argv
    flags = _parsed(argv)
    assert set(flags) <= set(entry["flags"]), f"not in {entry['path']}@{entry['commit'][:8]}: {set(flags) - set(entry['flags'])}"
    for flag, choices in entry["choices"].items():
        if flag in flags:
            assert flags[flag] in choices, (flag, flags[flag], choices)
    # Flags the converter parses but does not act on (its main() never reads them): passing one means
    # the plan expects something the checkpoint will not have.
    assert not set(flags) & set(entry.get("ignored", [])), (entry["path"], flags)
    if "pp_size == 1" in entry.get("asserts", []):
        assert flags.get("pp_size", "1") == "1", flags
    return flags


def _checkpoint_argv(plan: Any, profile: str) -> list[str]:
    steps = plan_steps(plan, get_profile(profile)).steps
    assert steps[0].name == "checkpoint"
    argv: list[str] = steps[0].argv
    return argv


# --- finding 5: GPT-2 --------------------------------------------------------------------------------

# tensorrt_llm/models/__init__.py @5955b8af (v0.8.0) MODEL_MAP has no GPTForCausalLM (its GPT is
# examples/gpt/build.py's GPTLMHeadModel); 0.7.1 builds only Llama here.
@pytest.mark.parametrize("profile", ["lmi-0.26.0-trtllm-0.7.1", "lmi-0.27.0-trtllm-0.8.0"])
def test_gpt2_refused_before_trtllm_0_9(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", GPT2, profile=profile, tp="1")
    assert not plan.valid
    refusal = [e for e in plan.errors if e.code == "architecture_version"]
    assert len(refusal) == 1, plan.errors
    message = refusal[0].message
    assert "GPTForCausalLM" in message and "TensorRT-LLM 0.9.0 or newer" in message and "\n" not in message
    assert "lmi-0.28.0-trtllm-0.9.0" in message and "--profile lmi-0.28.0-trtllm-0.9.0" in str(refusal[0].hint)


# examples/gpt/convert_checkpoint.py --gpt_variant (@250d9c29:45, @9bd15f19:45, @05316d33:45,
# @28fb9aac:26; models/core/gpt later): argparse exits on --model_version.
@pytest.mark.parametrize("profile", sorted(GPT_CONVERTER))
def test_gpt2_converter_takes_gpt_variant(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", GPT2, profile=profile, tp="1")
    assert plan.valid, plan.errors
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), GPT_CONVERTER[profile])
    assert flags["gpt_variant"] == "gpt2"
    assert "model_version" not in flags


@pytest.mark.parametrize("variant", ["santacoder", "starcoder"])
def test_gpt_variant_follows_the_version_option(variant: str, plan_model: Any) -> None:
    profile = "lmi-0.30.0-trtllm-0.12.0"
    plan = plan_model("trtllm", GPT2, profile=profile, tp="1", option=(f"gpt_model_version={variant}",))
    assert plan.valid, plan.errors
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), GPT_CONVERTER[profile])
    assert flags["gpt_variant"] == variant


# --- finding 4: Falcon and ChatGLM -------------------------------------------------------------------

# nvidia-modelopt 0.47.0 torch/export/tensorrt_llm_utils.py:343-347: "Cannot export tensorrt_llm
# checkpoint for model falcon" (and chatglm): the ModelOpt route never produces their checkpoint.
@pytest.mark.parametrize("model", FALCON)
@pytest.mark.parametrize("profile", CHECKPOINT_PROFILES)
def test_falcon_converts_with_the_releases_own_converter(profile: str, model: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", model, profile=profile, tp="1", trust_remote_code=True)
    assert plan.valid, plan.errors
    build = plan.knobs(TrtllmBuild)
    assert build.checkpoint_route == "vendor" and build.modelopt_decoder is None
    assert all(step.name != "checkpoint" or step.where == "container"
               for step in plan_steps(plan, get_profile(profile)).steps)  # nothing converts on this host
    argv = _checkpoint_argv(plan, profile)
    contrib = profile in ("lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0")
    expected = "{examples}/models/contrib/falcon/convert_checkpoint.py" if contrib else "{examples}/falcon/convert_checkpoint.py"
    assert argv[1] == expected
    flags = _parsed(argv)
    # 0.8's own copy (the tag's), else the nearest stored one (inferred for the other tags).
    assert set(flags) <= set(VENDOR["falcon@5955b8af" if profile == "lmi-0.27.0-trtllm-0.8.0" else "falcon@06255cb7"]["flags"]), flags
    assert flags["model_dir"] == "{model}" and flags["tp_size"] == "1"


@pytest.mark.parametrize("profile", sorted(CHATGLM_CONVERTER))
def test_chatglm_converts_with_chatglm_version(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", CHATGLM2, profile=profile, tp="1", trust_remote_code=True)
    assert plan.valid, plan.errors
    assert plan.knobs(TrtllmBuild).checkpoint_route == "vendor"
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), CHATGLM_CONVERTER[profile])
    # A local model directory's name tells the converter nothing (load_chatglm_config guesses from
    # config._name_or_path): the version is always passed.
    assert flags["chatglm_version"] == "chatglm2"
    assert "model_version" not in flags


@pytest.mark.parametrize(("lmi", "converter"), [("chatglm3_6b", "chatglm3"), ("chatglm3_6b_32k", "chatglm3"),
                                                ("chatglm2_6b_32k", "chatglm2")])
def test_chatglm_version_values_are_the_converters(lmi: str, converter: str, plan_model: Any) -> None:
    profile = "lmi-0.29.0-trtllm-0.11.0"
    plan = plan_model("trtllm", CHATGLM2, profile=profile, tp="1", trust_remote_code=True,
                      option=(f"chatglm_model_version={lmi}",))
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), CHATGLM_CONVERTER[profile])
    assert flags["chatglm_version"] == converter


def test_chatglm_on_0_8_converts_with_its_version_flag(plan_model: Any) -> None:
    # Issue 31 item 7: 0.8's examples/chatglm/convert_checkpoint.py (@5955b8af:24-31) has --chatglm_version and
    # its MODEL_MAP ChatGLM (models/__init__.py@5955b8af:83): planned with the flag, not refused as unread.
    profile = "lmi-0.27.0-trtllm-0.8.0"
    plan = plan_model("trtllm", CHATGLM2, profile=profile, tp="2", trust_remote_code=True,
                      option=("chatglm_model_version=chatglm2_6b_32k",))
    assert plan.valid, plan.errors
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), "chatglm@5955b8af")
    assert flags["chatglm_version"] == "chatglm2" and flags["tp_size"] == "2"


# --- finding 9: pre-quantized GPTQ on 0.7.1 and the 0.10 flag name ------------------------------------

GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": True}


@pytest.fixture
def gptq_llama(model_dir: Any) -> Path:
    from tests.fixtures_trtllm import LLAMA

    path: Path = model_dir(LLAMA, dirname="llama-gptq", quantization_config=GPTQ)
    return path


def _legacy_flags(argv: list[str]) -> dict[str, str]:
    flags = _parsed(argv)
    entry = VENDOR["legacy llama build.py (0.7-era stored copy)"]
    assert argv[1] == "{examples}/llama/build.py"
    assert set(flags) <= set(entry["flags"]), set(flags) - set(entry["flags"])
    assert flags["weight_only_precision"] in entry["choices"]["weight_only_precision"]
    return flags


# examples/llama/build.py @80bc0751:143 (--quant_ckpt_path), :334 (--weight_only_precision ... int4_gptq);
# with --per_group it loads the GPTQ weights from that one file (load_from_gptq_llama).
def test_prequantized_gptq_builds_with_0_7_build_py(gptq_llama: Path, plan_model: Any) -> None:
    profile = "lmi-0.26.0-trtllm-0.7.1"
    plan = plan_model("trtllm", gptq_llama, profile=profile, tp="1")
    assert plan.valid, plan.errors
    steps = plan_steps(plan, get_profile(profile)).steps
    assert [step.name for step in steps] == ["engine"]  # build.py reads the model itself: no checkpoint step
    flags = _legacy_flags(steps[0].argv)
    assert flags["model_dir"] == "{model}" and flags["quant_ckpt_path"] == "{model}/model.safetensors"
    assert flags["weight_only_precision"] == "int4_gptq" and "per_group" in flags and "use_weight_only" in flags
    assert flags["group_size"] == "64"  # the model's, not build.py's default 128


def test_prequantized_awq_still_refused_on_0_7(model_dir: Any, plan_model: Any) -> None:
    from tests.fixtures_trtllm import LLAMA

    awq = model_dir(LLAMA, dirname="llama-awq", quantization_config={"quant_method": "awq", "bits": 4,
                                                                       "group_size": 128, "zero_point": True})
    plan = plan_model("trtllm", awq, profile="lmi-0.26.0-trtllm-0.7.1", tp="1")
    assert any(e.code == "trtllm_route" and "awq" in e.message for e in plan.errors), plan.errors


def test_gptq_path_flag_of_0_10_is_modelopt_quant_ckpt_path(gptq_llama: Path, plan_model: Any) -> None:
    # No LMI profile ships TensorRT-LLM 0.10: the 0.11 profile's facts with 0.10's version, through the
    # same step generator (examples/llama/convert_checkpoint.py @9bd15f19: --modelopt_quant_ckpt_path).
    plan = plan_model("trtllm", gptq_llama, profile="lmi-0.29.0-trtllm-0.11.0", tp="1")
    assert plan.valid, plan.errors
    at_0_10 = get_profile("lmi-0.29.0-trtllm-0.11.0").model_copy(update={"tensorrt_llm": "0.10.0"})
    flags = _parsed(plan_steps(plan, at_0_10).steps[0].argv)
    assert flags["modelopt_quant_ckpt_path"] == "{model}/model.safetensors"
    assert "quant_ckpt_path" not in flags and "ammo_quant_ckpt_path" not in flags


def test_gptq_at_0_11_takes_quant_ckpt_path_and_the_models_group_size(gptq_llama: Path, plan_model: Any) -> None:
    profile = "lmi-0.29.0-trtllm-0.11.0"
    plan = plan_model("trtllm", gptq_llama, profile=profile, tp="1")
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), "llama@05316d33")
    assert flags["quant_ckpt_path"] == "{model}/model.safetensors"
    assert flags["group_size"] == "64" and flags["weight_only_precision"] == "int4_gptq"


# main(): assert args.pp_size == 1 in every copy read: examples/chatglm/convert_checkpoint.py @5955b8af:1093,
# @250d9c29:1013, @9691e12b:1020, @a681853d:1020; examples/models/core/glm-4-9b (stored at 10c1d594).
@pytest.mark.parametrize("profile", sorted(CHATGLM_CONVERTER))
def test_chatglm_pipeline_parallel_refused_where_the_converter_asserts_pp_1(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", CHATGLM2, profile=profile, tp="1", pp="2", trust_remote_code=True)
    refusal = [e for e in plan.errors if e.code == "trtllm_route"]
    assert len(refusal) == 1, plan.errors
    directory = CHATGLM_CONVERTER[profile].split("@")[0]
    assert "pp_size == 1" in refusal[0].message and f"{directory}/convert_checkpoint.py" in refusal[0].message
    assert plan_model("trtllm", CHATGLM2, profile=profile, tp="2", trust_remote_code=True).valid


# --- the ModelOpt route audit (finding 4's class): Phi, GPT-J, Baichuan ---------------------------------
# nvidia-modelopt 0.47.0 torch/export/tensorrt_llm_utils.py:240-347 raises NotImplementedError for the
# decoder types phi, gptj and baichuan (tests/targets/trtllm/test_trtllm_modelopt_routes.py reads the list it handles
# from the installed source): their checkpoints come from the release's own converter, in the container.
# The converter_flags.json entry standing for each profile (an entry's commit is that tag's own only where
# "inferred" is false; the others are the nearest stored copies, see their "tags").

PHI2 = "microsoft--phi-2"
GPTJ = "EleutherAI--gpt-j-6b"
BAICHUAN2 = "baichuan-inc--Baichuan2-13B-Chat"
# 0.9.0 (and the 0.10-era main 9bc87978) has a three-flag Phi converter: see test_phi_on_0_9_... below.
PHI_CONVERTER = {"lmi-0.27.0-trtllm-0.8.0": "phi (pre-0.9 stored copy)",
                 "lmi-0.29.0-trtllm-0.11.0": "phi@5a702100", "lmi-0.30.0-trtllm-0.12.0": "phi@5a702100",
                 "lmi-0.33.0-trtllm-0.21.0": "models/core/phi@10c1d594",
                 "djl-nightly-trtllm-1.0.0": "models/core/phi@10c1d594"}
GPTJ_CONVERTER = {"lmi-0.27.0-trtllm-0.8.0": "gptj@5955b8af", "lmi-0.28.0-trtllm-0.9.0": "gptj@250d9c29", "lmi-0.29.0-trtllm-0.11.0": "gptj@250d9c29",
                  "lmi-0.30.0-trtllm-0.12.0": "gptj@250d9c29", "lmi-0.33.0-trtllm-0.21.0": "models/contrib/gptj@25b6cdd8",
                  "djl-nightly-trtllm-1.0.0": "models/contrib/gptj@25b6cdd8"}
BAICHUAN_CONVERTER = {"lmi-0.27.0-trtllm-0.8.0": "baichuan@0ab9d17a", "lmi-0.28.0-trtllm-0.9.0": "baichuan@0ab9d17a",
                      "lmi-0.29.0-trtllm-0.11.0": "baichuan@8fcf9fc2", "lmi-0.30.0-trtllm-0.12.0": "baichuan@8fcf9fc2",
                      "lmi-0.33.0-trtllm-0.21.0": "models/contrib/baichuan@25b6cdd8",
                      "djl-nightly-trtllm-1.0.0": "models/contrib/baichuan@25b6cdd8"}


def _vendor_plan(model: str, profile: str, plan_model: Any, **fields: Any) -> Any:
    plan = plan_model("trtllm", model, profile=profile, trust_remote_code=True, **{"tp": "1", **fields})
    assert plan.valid, plan.errors
    build = plan.knobs(TrtllmBuild)
    assert build.checkpoint_route == "vendor" and build.modelopt_decoder is None
    steps = plan_steps(plan, get_profile(profile)).steps
    assert steps[0].name == "checkpoint" and steps[0].where == "container"  # nothing exports on this host
    return plan


@pytest.mark.parametrize("profile", sorted(PHI_CONVERTER))
def test_phi_converts_with_the_releases_own_converter(profile: str, plan_model: Any) -> None:
    plan = _vendor_plan(PHI2, profile, plan_model)
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), PHI_CONVERTER[profile])
    assert flags["model_dir"] == "{model}" and flags["pp_size"] == "1"


@pytest.mark.parametrize("profile", sorted(PHI_CONVERTER))
def test_phi_pipeline_parallel_refused_where_the_converter_asserts_pp_1(profile: str, plan_model: Any) -> None:
    assert "pp_size == 1" in VENDOR[PHI_CONVERTER[profile]]["asserts"]
    plan = plan_model("trtllm", PHI2, profile=profile, tp="1", pp="2")
    refusal = [e for e in plan.errors if e.code == "trtllm_route"]
    assert len(refusal) == 1, plan.errors
    assert "pp_size == 1" in refusal[0].message and "phi/convert_checkpoint.py" in refusal[0].message


PHI_0_9 = "lmi-0.28.0-trtllm-0.9.0"


def test_phi_on_0_9_passes_only_the_flags_its_converter_parses(plan_model: Any) -> None:
    # examples/phi/convert_checkpoint.py @250d9c29 (v0.9.0):23-36 parses --model_dir --dtype --output_dir
    # only (tests/vendor/trtllm/script_flags.json); --tp_size/--pp_size/--workers make argparse exit 2.
    sys.path.insert(0, str(STANDINS_DIR))
    from vendor_argparse import check_flags, script_flags

    plan = _vendor_plan(PHI2, PHI_0_9, plan_model)
    argv = _checkpoint_argv(plan, PHI_0_9)
    assert argv[1] == "{examples}/phi/convert_checkpoint.py"
    flags, source = script_flags("0.9.0", "examples/phi/convert_checkpoint.py")
    assert flags is not None and "@250d9c29" in source
    assert check_flags(flags, argv[2:], "convert_checkpoint.py") is None, argv
    assert set(_parsed(argv)) == {"model_dir", "output_dir", "dtype"}


@pytest.mark.parametrize(("fields", "flag"), [({"tp": "2"}, "tp 2"), ({"tp": "1", "pp": "2"}, "pp 2")])
def test_phi_on_0_9_refuses_what_its_converter_cannot_write(fields: dict[str, str], flag: str,
                                                             plan_model: Any) -> None:
    # PhiForCausalLM.convert_hf_checkpoint @250d9c29 (models/phi/model.py:166-183, convert.py:48-62)
    # writes a config without a mapping: one rank.
    plan = plan_model("trtllm", PHI2, profile=PHI_0_9, trust_remote_code=True, **fields)
    refusal = [e for e in plan.errors if e.code == "trtllm_route"]
    assert len(refusal) == 1, plan.errors
    assert "phi/convert_checkpoint.py" in refusal[0].message and flag in refusal[0].message


@pytest.mark.parametrize("profile", sorted(GPTJ_CONVERTER))
def test_gptj_converts_with_the_releases_own_converter(profile: str, plan_model: Any) -> None:
    plan = _vendor_plan(GPTJ, profile, plan_model)
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), GPTJ_CONVERTER[profile])
    assert flags["model_dir"] == "{model}" and flags["tp_size"] == "1"


@pytest.mark.parametrize("profile", sorted(BAICHUAN_CONVERTER))
def test_baichuan_converts_with_the_releases_own_converter(profile: str, plan_model: Any) -> None:
    plan = _vendor_plan(BAICHUAN2, profile, plan_model)
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), BAICHUAN_CONVERTER[profile])
    assert flags["model_version"] == "v2_13b"  # inferred from the shapes (recipes/baichuan.toml)


@pytest.mark.parametrize("profile", ["lmi-0.29.0-trtllm-0.11.0", "lmi-0.30.0-trtllm-0.12.0", "lmi-0.33.0-trtllm-0.21.0"])
def test_baichuan_smoothquant_with_int8_kv_cache_converts(profile: str, plan_model: Any) -> None:
    plan = _vendor_plan(BAICHUAN2, profile, plan_model, quantize="smoothquant",
                        option=("kv_cache_dtype=int8", "smoothquant_per_token=true"))
    flags = assert_vendor_accepts(_checkpoint_argv(plan, profile), BAICHUAN_CONVERTER[profile])
    assert "smoothquant" in flags and "per_token" in flags and "int8_kv_cache" in flags


@pytest.mark.parametrize("profile", ["lmi-0.27.0-trtllm-0.8.0", "lmi-0.28.0-trtllm-0.9.0"])
def test_baichuan_int8_kv_cache_refused_where_the_converter_ignores_the_flag(profile: str, plan_model: Any) -> None:
    # The pre-0.9 converter parses --int8_kv_cache but sets the INT8 KV cache from --calibrate_kv_cache.
    assert "int8_kv_cache" in VENDOR[BAICHUAN_CONVERTER[profile]]["ignored"]
    plan = plan_model("trtllm", BAICHUAN2, profile=profile, tp="1", trust_remote_code=True, quantize="smoothquant",
                      option=("kv_cache_dtype=int8",))
    refusal = [e for e in plan.errors if e.code == "trtllm_route"]
    assert len(refusal) == 1, plan.errors
    assert "--int8_kv_cache" in refusal[0].message
    without = _vendor_plan(BAICHUAN2, profile, plan_model, quantize="smoothquant")
    assert "smoothquant" in assert_vendor_accepts(_checkpoint_argv(without, profile), BAICHUAN_CONVERTER[profile])


def test_baichuan_fp8_refused_not_sent_to_modelopt(plan_model: Any) -> None:
    # FP8 was planned valid through the host ModelOpt export, which raises NotImplementedError for
    # baichuan; lmi-build has no FP8 converter route (planning/quantization.py vendor_quant_algo).
    plan = plan_model("trtllm", BAICHUAN2, profile="lmi-0.30.0-trtllm-0.12.0", tp="2", quantize="fp8",
                      trust_remote_code=True)
    assert [e.code for e in plan.errors] == ["quantize_route_unsupported"], plan.errors
