"""What each TensorRT-LLM version accepts, decided at plan time: the flags of that version's tools,
the container's own defaults fitted to the model, hardware rules, and routes lmi-build cannot build.
A valid plan is one whose steps generate (and render as build-engines.sh) for its profile."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.versions import release
from lmi_build.runners import ScriptRunner, run_steps
from lmi_build.targets.trtllm.flags import flag_table
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.steps import engine_script, plan_steps, trtllm_paths
from tests.fixtures_planning import codes, fixture_names, warning_codes
from tests.fixtures_trtllm import LLAMA
from tests.paths import FIXTURES_DIR

LEGACY = "lmi-0.26.0-trtllm-0.7.1"
PROFILES = [p.name for p in load_profiles()]
GPT2 = "openai-community--gpt2"


def _argv(plan: Any, profile: str, step: str) -> list[str]:
    return next(s.argv for s in plan_steps(plan, get_profile(profile)).steps if s.name == step)


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_legacy_smoothquant_reads_ft_model_dir_and_refuses_bf16(plan_model: Any) -> None:
    plan = plan_model("trtllm", LLAMA, profile=LEGACY, quantize="smoothquant", tp="1")
    assert plan.valid, plan.errors
    engine = _argv(plan, LEGACY, "engine")
    assert _value(engine, "--ft_model_dir") == "{checkpoint}/1-gpu" and "--bin_model_dir" not in engine
    assert _value(_argv(plan, LEGACY, "checkpoint"), "--storage-type") == "fp16"
    bf16 = plan_model("trtllm", LLAMA, profile=LEGACY, quantize="smoothquant", dtype="bf16", tp="1")
    assert "smoothquant_dtype" in codes(bf16)
    assert "fp32, fp16, not bf16" in next(e.message for e in bf16.errors if e.code == "smoothquant_dtype")
    assert plan_model("trtllm", LLAMA, profile=LEGACY, dtype="bf16", tp="1").valid  # bf16 alone builds


def test_legacy_tokens_per_block_at_least_128_with_context_fmha(plan_model: Any) -> None:
    default = plan_model("trtllm", LLAMA, profile=LEGACY, tp="1")
    assert default.valid and "tokens_per_block_fitted" in warning_codes(default)
    engine = _argv(default, LEGACY, "engine")
    assert "--enable_context_fmha" in engine and _value(engine, "--tokens_per_block") == "128"
    assert default.options["option.tokens_per_block"] == "128"  # serving.properties says what the engine has
    user = plan_model("trtllm", LLAMA, profile=LEGACY, tp="1", option=("tokens_per_block=64",))
    assert "tokens_per_block_min" in codes(user)
    assert flag_table("0.8.0").limits.context_fmha_min_tokens_per_block is None


@pytest.mark.parametrize(("profile", "flag"), [("lmi-0.27.0-trtllm-0.8.0", "--ammo_quant_ckpt_path"),
                                               ("lmi-0.28.0-trtllm-0.9.0", "--ammo_quant_ckpt_path"),
                                               ("lmi-0.30.0-trtllm-0.12.0", "--quant_ckpt_path"),
                                               ("lmi-0.33.0-trtllm-0.21.0", "--quant_ckpt_path")])
def test_prequantized_gptq_names_the_safetensors_file(profile: str, flag: str, plan_model: Any,
                                                      tmp_path: Path) -> None:
    import json

    source = json.loads((FIXTURES_DIR / "hf-configs" / LLAMA / "config.json").read_text())
    source["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}
    model = tmp_path / "gptq"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(source))
    (model / "tokenizer.json").write_text("{}")  # a plan refuses a model without a tokenizer
    plan = plan_model("trtllm", model, profile=profile, tp="1")
    assert plan.valid, plan.errors
    checkpoint = _argv(plan, profile, "checkpoint")
    assert _value(checkpoint, flag) == "{model}/model.safetensors"
    other = "--quant_ckpt_path" if flag == "--ammo_quant_ckpt_path" else "--ammo_quant_ckpt_path"
    assert other not in checkpoint


def test_internlm_converts_with_llama_from_0_9_and_examples_move_at_0_19() -> None:
    assert flag_table("0.8.0").example_dir("internlm") == "internlm"
    assert flag_table("0.9.0").example_dir("internlm") == "llama"
    assert flag_table("0.12.0").example_dir("llama") == "llama"
    assert flag_table("0.21.0rc1").example_dir("llama") == "models/core/llama"
    assert flag_table("0.21.0rc1").example_dir("falcon") == "models/contrib/falcon"


def test_trtllm_build_0_8_has_no_parallel_flags_and_multiple_profiles_from_0_9() -> None:
    table = flag_table("0.8.0")
    assert table.validate_argv("trtllm_build", ["--tp_size", "2"])
    assert not flag_table("0.9.0").validate_argv("trtllm_build", ["--multiple_profiles", "enable"])
    assert table.validate_argv("trtllm_build", ["--multiple_profiles", "enable"])


def test_profile_toolchain_facts() -> None:
    assert get_profile("lmi-0.30.0-trtllm-0.12.0").tensorrt == "10.3.0"
    for name in ("lmi-0.27.0-trtllm-0.8.0", "lmi-0.28.0-trtllm-0.9.0", "lmi-0.29.0-trtllm-0.11.0",
                 "lmi-0.30.0-trtllm-0.12.0"):
        assert get_profile(name).defaults["tokens_per_block"] == "128"
    for name in ("lmi-0.29.0-trtllm-0.11.0", "lmi-0.30.0-trtllm-0.12.0"):
        assert get_profile(name).defaults["max_num_tokens"] == "16384"


@pytest.mark.parametrize("profile", ["lmi-0.29.0-trtllm-0.11.0", "lmi-0.30.0-trtllm-0.12.0"])
def test_container_defaults_reach_the_engine(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", LLAMA, profile=profile, tp="1")
    engine = _argv(plan, profile, "engine")
    assert _value(engine, "--tokens_per_block") == "128" and _value(engine, "--max_num_tokens") == "16384"
    assert plan.options["option.max_num_tokens"] == "16384"
    user = plan_model("trtllm", LLAMA, profile=profile, tp="1", option=("max_num_tokens=4096",))
    assert _value(_argv(user, profile, "engine"), "--max_num_tokens") == "4096"


def test_max_seq_len_from_the_model_at_0_21(plan_model: Any) -> None:
    profile = "lmi-0.33.0-trtllm-0.21.0"
    plan = plan_model("trtllm", LLAMA, profile=profile, tp="1")
    assert plan.build.max_seq_len == 4096 and plan.build.max_input_len == 1024  # Llama-2: 4096 positions
    assert _value(_argv(plan, profile, "engine"), "--max_seq_len") == "4096"
    given = plan_model("trtllm", LLAMA, profile=profile, tp="1", max_output_len=256)
    assert given.build.max_seq_len == 1024 + 256
    older = plan_model("trtllm", LLAMA, profile="lmi-0.30.0-trtllm-0.12.0", tp="1")
    assert older.build.max_seq_len == 1024 + 512


@pytest.mark.parametrize("profile", PROFILES)
def test_defaults_are_fitted_to_the_model_user_values_are_errors(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", GPT2, profile=profile, tp="1")  # 1024 positions < 1024 + 512
    if release(get_profile(profile).tensorrt_llm) < (0, 9):  # no GPTForCausalLM before 0.9: refused
        assert "architecture_version" in codes(plan)
        return
    assert plan.valid, plan.errors
    assert "max_len_fitted" in warning_codes(plan)
    assert plan.build.max_input_len + plan.build.max_output_len <= 1024 and plan.build.max_seq_len <= 1024
    user = plan_model("trtllm", GPT2, profile=profile, tp="1", max_input_len=1000, max_output_len=100)
    assert "max_len_positions" in codes(user)
    one_side = plan_model("trtllm", GPT2, profile=profile, tp="1", max_input_len=900)
    assert one_side.valid and one_side.build.max_input_len == 900 and one_side.build.max_output_len == 124


def test_fp8_needs_sm89_at_plan_time(plan_model: Any) -> None:
    for instance, gpu in (("g5.12xlarge", "A10G"), ("p4d.24xlarge", "A100")):
        plan = plan_model("trtllm", LLAMA, quantize="fp8", tp="1", instance_type=instance)
        error = next(e for e in plan.errors if e.code == "gpu_quant")
        assert "sm89" in error.message and instance in error.message and gpu in error.message
    assert plan_model("trtllm", LLAMA, quantize="fp8", tp="1", instance_type="p5.48xlarge").valid
    by_name = plan_model("trtllm", LLAMA, quantize="fp8", tp="1", gpu="a10g")
    assert any("--gpu a10g (sm86)" in e.message for e in by_name.errors if e.code == "gpu_quant")
    assert plan_model("trtllm", LLAMA, quantize="fp8", tp="1", gpu="sm90").valid
    assert "gpu" in codes(plan_model("trtllm", LLAMA, tp="1", gpu="hopper"))  # not a GPU: named, not a traceback
    unknown = plan_model("trtllm", LLAMA, quantize="fp8", tp="1")
    assert unknown.valid and "gpu_requirement" in warning_codes(unknown)
    kv = plan_model("trtllm", LLAMA, quantize="fp8", tp="1", option=("kv_cache_dtype=fp8",),
                    instance_type="g5.12xlarge")
    assert any("KV cache" in e.message for e in kv.errors if e.code == "gpu_quant")


@pytest.mark.parametrize("profile", PROFILES)
def test_encoder_decoder_is_refused_at_plan_time(profile: str, plan_model: Any) -> None:
    plan = plan_model("trtllm", "google--flan-t5-large", profile=profile, tp="1")
    assert not plan.valid and "trtllm_route" in codes(plan)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_every_valid_fixture_plan_renders_a_script(profile_name: str, plan_model: Any, tmp_path: Path) -> None:
    """Every fixture config planned against every profile: a valid plan's steps generate and its
    build-engines.sh is valid POSIX sh (no traceback anywhere on the script route)."""
    profile = get_profile(profile_name)
    valid = 0
    for fixture in fixture_names():
        plan = plan_model("trtllm", fixture, profile=profile_name)
        if not plan.valid:
            continue
        steps = [s for s in plan_steps(plan, profile).steps if s.in_process is None]
        runner = ScriptRunner(image=profile.image)
        paths = trtllm_paths(model=tmp_path / "model", checkpoint=Path("checkpoint"), engine=Path("engine"))
        run_steps(steps, runner, tmp_path / fixture, paths, plan)
        script = tmp_path / f"{fixture}.sh"
        script.write_text(engine_script(runner, paths))
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0, fixture
        valid += 1
    assert valid >= 3


def test_smoothquant_per_token_is_not_a_credential() -> None:
    # option.smoothquant_per_token ends in "_token": the SmoothQuant per-token route packages it.
    from lmi_build.core.redaction import is_secret_key

    assert not is_secret_key("option.smoothquant_per_token")
    assert is_secret_key("option.hf_token") and is_secret_key("option.auth_token") and is_secret_key("token")


@pytest.mark.parametrize(("profile", "engine"), [("lmi-0.33.0-trtllm-0.21.0", "Python"),
                                                 ("djl-nightly-trtllm-1.0.0", "Python"),
                                                 ("lmi-0.30.0-trtllm-0.12.0", "MPI")])
def test_serving_engine_per_layout_at_tp2(profile: str, engine: str, plan_model: Any) -> None:
    # Flat (LLM API): one Python process whose LLM(...) starts the ranks; toolkit: one MPI rank per GPU.
    plan = plan_model("trtllm", LLAMA, profile=profile, tp="2")
    assert plan.valid and plan.options["engine"] == engine
    assert "option.mpi_mode" not in plan.options
