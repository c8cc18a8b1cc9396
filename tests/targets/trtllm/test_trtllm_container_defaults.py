"""Issue 22: what a plain trtllm plan writes equals what each LMI release's container does on its own
(defaults from the profiles' cited [defaults]), and what a release's TensorRT-LLM cannot build is
refused at plan time. Every test plans through the real planner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.core.container_profiles import read_profile
from lmi_build.core.errors import LmiBuildError
from lmi_build.targets.trtllm.engine_match import engine_mismatches, expectation_from_properties
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.layouts import FLAT
from lmi_build.targets.trtllm.profiles import PROFILES_DIR, ContainerProfile, get_profile
from lmi_build.targets.trtllm.since import missing_scaling
from lmi_build.targets.trtllm.steps import plan_steps
from tests.fixtures_trtllm import LLAMA, TrtllmPlanner

# deepjavalibrary/djl-serving LmiConfigRecommender.setRollingBatchSize for rolling_batch=trtllm:
# @v0.28.0:168-174, @v0.29.0:174-180, @0.30.0-dlc:133-139 -> 256 (and max_num_tokens 16384 when unset).
RECOMMENDER_256 = ["lmi-0.28.0-trtllm-0.9.0", "lmi-0.29.0-trtllm-0.11.0", "lmi-0.30.0-trtllm-0.12.0"]


def _engine_argv(plan: object, profile: str) -> list[str]:
    return plan_steps(plan, get_profile(profile)).steps[-1].argv  # type: ignore[arg-type]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("profile", RECOMMENDER_256)
def test_default_batch_is_the_containers(profile: str, trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan(profile, tp="1")
    assert plan.knobs(TrtllmBuild).max_batch_size == 256
    assert plan.options["option.max_rolling_batch_size"] == "256"
    assert plan.options["option.max_num_tokens"] == "16384"
    argv = _engine_argv(plan, profile)
    assert _flag(argv, "--max_batch_size") == "256"
    assert _flag(argv, "--max_num_tokens") == "16384"


def test_user_batch_wins_over_the_release_default(trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan("lmi-0.28.0-trtllm-0.9.0", tp="1", max_batch_size=8, option=("max_num_tokens=4096",))
    assert plan.knobs(TrtllmBuild).max_batch_size == 8
    assert plan.options["option.max_rolling_batch_size"] == "8"
    assert _flag(_engine_argv(plan, "lmi-0.28.0-trtllm-0.9.0"), "--max_num_tokens") == "4096"


def test_0_27_keeps_the_recommenders_32(trtllm_plan: TrtllmPlanner) -> None:
    # @v0.27.0 setRollingBatchSize:147-165: 32 unless option.max_num_tokens is set.
    plan = trtllm_plan("lmi-0.27.0-trtllm-0.8.0", tp="1")
    assert plan.knobs(TrtllmBuild).max_batch_size == 32
    assert plan.options["option.max_rolling_batch_size"] == "32"


def test_release_batch_default_is_profile_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               trtllm_plan: TrtllmPlanner) -> None:
    """The default comes from the profile file, not from code: change the file, the plan follows."""
    name = "lmi-0.29.0-trtllm-0.11.0"
    text = (PROFILES_DIR / f"{name}.toml").read_text()
    assert 'max_rolling_batch_size = "256"' in text
    (tmp_path / "trtllm").mkdir()
    (tmp_path / "trtllm" / f"{name}.toml").write_text(text.replace('max_rolling_batch_size = "256"',
                                                        'max_rolling_batch_size = "96"'))
    monkeypatch.setenv("LMI_BUILD_PROFILES_DIR", str(tmp_path))
    plan = trtllm_plan(name, tp="1")
    assert plan.knobs(TrtllmBuild).max_batch_size == 96
    assert plan.options["option.max_rolling_batch_size"] == "96"


def test_unknown_profile_default_key_is_refused(tmp_path: Path) -> None:
    source = PROFILES_DIR / "lmi-0.29.0-trtllm-0.11.0.toml"
    bad = tmp_path / source.name
    bad.write_text(source.read_text().replace("max_rolling_batch_size =", "max_rolling_batch =", 1))
    with pytest.raises(LmiBuildError, match="max_rolling_batch"):
        read_profile(bad, ContainerProfile)



# tensorrt_llm/quantization/mode.py QuantAlgo W8A8_SQ_PER_CHANNEL (@5955b8af:208, @250d9c29:29,
# @05316d33:29, @28fb9aac:29): per-channel weight scales, per-tensor activations.
@pytest.mark.parametrize("profile", ["lmi-0.27.0-trtllm-0.8.0", *RECOMMENDER_256, "lmi-0.33.0-trtllm-0.21.0"])
def test_smoothquant_properties_state_the_engines_per_channel(profile: str, trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan(profile, tp="1", quantize="smoothquant")
    assert plan.quantization.quant_algo == "W8A8_SQ_PER_CHANNEL"
    assert plan.options["option.smoothquant_per_channel"] == "true"
    assert plan.options["option.smoothquant_per_token"] == "false"


def test_smoothquant_per_channel_false_given_is_written_as_the_engine_has(trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan("lmi-0.30.0-trtllm-0.12.0", tp="1", quantize="smoothquant",
                       option=("smoothquant_per_channel=false",))
    assert plan.quantization.quant_algo == "W8A8_SQ_PER_CHANNEL"
    assert plan.options["option.smoothquant_per_channel"] == "true"
    assert "smoothquant_granularity" in {w.code for w in plan.warnings}


def test_per_tensor_weight_smoothquant_keeps_per_channel_false(trtllm_plan: TrtllmPlanner) -> None:
    # convert_checkpoint.py --per_token without --per_channel: W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN.
    plan = trtllm_plan("lmi-0.30.0-trtllm-0.12.0", tp="1", quantize="smoothquant",
                       option=("smoothquant_per_token=true",))
    assert plan.quantization.quant_algo == "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN"
    assert plan.options["option.smoothquant_per_channel"] == "false"


# meta-llama/Llama-3.1-8B config.json, over the Llama-2 fixture (same architecture, llama3 RoPE).
LLAMA_3_1 = {"hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
             "num_key_value_heads": 8, "rope_theta": 500000.0, "vocab_size": 128256, "torch_dtype": "bfloat16",
             "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


@pytest.mark.parametrize("profile", ["lmi-0.27.0-trtllm-0.8.0", "lmi-0.28.0-trtllm-0.9.0", "lmi-0.29.0-trtllm-0.11.0"])
def test_llama3_rope_refused_before_trtllm_0_12(profile: str, plan_model: Any, model_dir: Any) -> None:
    plan = plan_model("trtllm", model_dir(LLAMA, dirname="Llama-3.1-8B", **LLAMA_3_1), profile=profile, tp="1")
    assert not plan.valid
    refusal = [e for e in plan.errors if e.code == "rope_scaling_version"]
    assert len(refusal) == 1, plan.errors
    assert "\n" not in refusal[0].message
    assert f"profile {profile}" in refusal[0].message
    assert "TensorRT-LLM 0.12.0 or newer" in refusal[0].message
    assert "lmi-0.30.0-trtllm-0.12.0" in refusal[0].message and "--profile lmi-0.30.0-trtllm-0.12.0" in str(refusal[0].hint)


@pytest.mark.parametrize("profile", ["lmi-0.30.0-trtllm-0.12.0", "lmi-0.33.0-trtllm-0.21.0"])
def test_llama3_rope_plans_from_trtllm_0_12(profile: str, plan_model: Any, model_dir: Any) -> None:
    plan = plan_model("trtllm", model_dir(LLAMA, dirname="Llama-3.1-8B", **LLAMA_3_1), profile=profile, tp="1")
    assert "rope_scaling_version" not in {e.code for e in plan.errors}
    assert plan.valid, plan.errors


def test_rope_scaling_since_is_data() -> None:
    entry = missing_scaling("llama3", "0.11.0")
    assert entry is not None and entry.since == "0.12.0" and entry.sources
    assert missing_scaling("llama3", "0.12.0") is None and missing_scaling("linear", "0.8.0") is None


# djl-serving 0.33.0-dlc properties_manager/trt_properties.py:42 (pipeline_parallel_size) and :138
# (LLM(pipeline_parallel_size=self.pipeline_parallel_size)): the flat layout's service never reads
# pipeline_parallel_degree.
@pytest.mark.parametrize("profile", ["lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0"])
def test_flat_layout_writes_the_services_pipeline_key(profile: str, trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan(profile, tp="2", pp="2")
    assert plan.options["option.pipeline_parallel_size"] == "2"
    written = serving_properties(plan, FLAT)
    assert written["option.pipeline_parallel_size"] == "2"
    assert written["option.tensor_parallel_degree"] == "2"


def test_flat_layout_user_pipeline_size_follows_the_engine(trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan("lmi-0.33.0-trtllm-0.21.0", tp="1", option=("pipeline_parallel_size=4",))
    assert plan.options["option.pipeline_parallel_size"] == "1"


def test_toolkit_layout_keeps_pipeline_parallel_degree(trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan("lmi-0.30.0-trtllm-0.12.0", tp="2", pp="2")
    assert plan.options["option.pipeline_parallel_degree"] == "2"
    assert "option.pipeline_parallel_size" not in plan.options


def test_engine_world_size_read_from_the_flat_services_key() -> None:
    config = {"build_config": {"max_batch_size": 8, "max_input_len": 512},
              "pretrained_config": {"mapping": {"world_size": 2, "tp_size": 1, "pp_size": 2}}}
    properties = {"option.tensor_parallel_degree": "1", "option.pipeline_parallel_size": "2"}
    assert engine_mismatches(config, expectation_from_properties(properties)) == []
    wrong = {**properties, "option.pipeline_parallel_size": "4"}
    assert "world size: engine 2, serving.properties 4" in engine_mismatches(config, expectation_from_properties(wrong))


AUTOAWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


# examples/models/core/llama/convert_checkpoint.py (0.19+ layout) has no --use_autoawq: it reads the
# model's quantization_config (update_quant_config_from_hf); argparse exits on an unknown flag.
@pytest.mark.parametrize("profile", ["lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0"])
def test_autoawq_convert_passes_no_use_autoawq_flag(profile: str, plan_model: Any, model_dir: Any) -> None:
    plan = plan_model("trtllm", model_dir(LLAMA, dirname="llama-awq", quantization_config=AUTOAWQ),
                      profile=profile, tp="1")
    assert plan.valid, plan.errors
    convert = plan_steps(plan, get_profile(profile)).steps[0]
    assert convert.argv[1].endswith("/models/core/llama/convert_checkpoint.py")
    assert "--use_autoawq" not in convert.argv
    assert _flag(convert.argv, "--weight_only_precision") == "int4_gptq"


def test_autoawq_still_refused_before_0_16(plan_model: Any, model_dir: Any) -> None:
    plan = plan_model("trtllm", model_dir(LLAMA, dirname="llama-awq", quantization_config=AUTOAWQ),
                      profile="lmi-0.30.0-trtllm-0.12.0", tp="1")
    assert any(e.code == "trtllm_route" and "0.16" in e.message for e in plan.errors), plan.errors


# tensorrt_llm/models/__init__.py @5955b8af:74-91 (0.8.0) has no QWenForCausalLM: trtllm-build stops
# with "Unsupported model architecture" (commands/build.py:252-254).
def test_qwen_v1_refused_on_0_8(plan_model: Any) -> None:
    plan = plan_model("trtllm", "Qwen--Qwen-7B", profile="lmi-0.27.0-trtllm-0.8.0", tp="1", trust_remote_code=True)
    refusal = [e for e in plan.errors if e.code == "architecture_version"]
    assert len(refusal) == 1, plan.errors
    assert "QWenForCausalLM" in refusal[0].message and "lmi-0.28.0-trtllm-0.9.0" in refusal[0].message
    assert "\n" not in refusal[0].message


def test_qwen_v1_plans_from_0_9(trtllm_plan: TrtllmPlanner) -> None:
    plan = trtllm_plan("lmi-0.28.0-trtllm-0.9.0", "Qwen--Qwen-7B", tp="1", trust_remote_code=True)
    assert plan.knobs(TrtllmBuild).trtllm_architecture == "QWenForCausalLM"
