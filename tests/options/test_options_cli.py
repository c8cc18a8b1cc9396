"""`lmi-build config show` and `lmi-build config options`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmi_build.options.spec import all_option_specs
from tests.cli_process import run_lmi_build

_ENV_PREFIXES = ("OPTION_", "SERVING_", "HF_", "SM_", "TENSOR_PARALLEL", "PIPELINE_PARALLEL", "MAX_", "CUDA_MEMORY", "ENABLE_CUDA")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No stray LMI variables of the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES) or name == "DJL_ENTRY_POINT":
            monkeypatch.delenv(name)
    return monkeypatch


def _show(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = run_lmi_build("config", "show", "--json", *args)
    return result.returncode, json.loads(result.stdout)


def test_show_json_sources(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("engine=MPI\noption.tensor_parallel_degree=4\noption.dtype=bf16\n")
    clean_env.setenv("OPTION_DTYPE", "fp32")
    clean_env.setenv("SM_NUM_GPUS", "8")
    clean_env.setenv("OPTION_MAX_INPUT_LEN", "4096")
    code, data = _show("--properties", str(properties), "--option", "max_input_len=2048", "-o", "quantize=awq")
    assert code == 0
    options = data["options"]
    assert options["option.max_input_len"] == {
        "value": "2048", "source": "cli", "origin": "--option max_input_len", "build_relevant": True,
    }
    assert options["option.dtype"]["value"] == "bf16" and options["option.dtype"]["origin"] == "serving.properties:3"
    assert options["option.tensor_parallel_degree"]["source"] == "properties"
    assert options["engine"] == {"value": "Python", "source": "alias",
                                 "origin": "engine=MPI (serving.properties:1)", "build_relevant": False}
    assert options["option.awq_calib_size"]["source"] == "default"
    assert options["job_queue_size"]["build_relevant"] is False
    assert next(iter(options)) == "engine"
    assert data["errors"] == [] and data["warnings"] == [] and data["target"] == "trtllm"


def test_show_env_translation(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("SM_NUM_GPUS", "8")
    clean_env.setenv("CUDA_MEMORY_FRACTION", "0.7")
    code, data = _show("--target", "hf")
    assert code == 0
    assert data["options"]["option.tensor_parallel_degree"] == {
        "value": "8", "source": "env", "origin": "SM_NUM_GPUS", "build_relevant": True,
    }
    assert data["options"]["option.gpu_memory_utilization"]["value"] == "0.7"


def test_show_ignores_env_with_no_env(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPTION_TENSOR_PARALLEL_DEGREE", "8")
    code, data = _show("--no-env")
    assert code == 0 and data["options"]["option.tensor_parallel_degree"]["source"] == "default"


def test_show_exits_2_on_errors(clean_env: pytest.MonkeyPatch) -> None:
    code, data = _show("--option", "tensor_parallel_degree=abc")
    assert code == 2
    (error,) = data["errors"]
    assert error["code"] == "invalid_value"
    assert error["message"].startswith('option.tensor_parallel_degree=abc: expected an integer or "max"')


def test_show_strict(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("option.not_a_real_option=1\n")
    relaxed_code, relaxed = _show("-p", str(properties))
    strict_code, strict = _show("-p", str(properties), "--strict")
    assert relaxed_code == 0 and [w["code"] for w in relaxed["warnings"]] == ["unknown_option"]
    assert strict_code == 2 and [e["code"] for e in strict["errors"]] == ["unknown_option"]


def test_show_human_table_and_stderr(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("option.tensor_paralel_degree=4\n")
    result = run_lmi_build("config", "show", "-p", str(properties), "--target", "neuronx")
    assert result.returncode == 0
    assert "option.tensor_parallel_degree" in result.stdout and "option table" in result.stdout
    assert "did you mean option.tensor_parallel_degree?" in result.stderr
    assert "warning" not in result.stdout


def test_show_redacts_credentials(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    token = "hf_" + "Zz9" * 12
    clean_env.setenv("HF_TOKEN", token)
    properties = tmp_path / "serving.properties"
    properties.write_text(f"option.hf_token={token}\noption.model_id=https://x:{token}@host/m\n")
    for args in (["--json"], []):
        result = run_lmi_build("config", "show", "-p", str(properties), *args)
        assert result.returncode == 0
        assert token not in result.stdout and token not in result.stderr
    _, data = _show("-p", str(properties))
    assert data["options"]["option.hf_token"]["value"] == "***"
    assert data["options"]["option.model_id"]["value"] == "https://x:***@host/m"


def test_options_reference(clean_env: pytest.MonkeyPatch) -> None:
    result = run_lmi_build("config", "options", "--json")
    assert result.returncode == 0
    rows = json.loads(result.stdout)
    assert [row["key"] for row in rows] == [spec.key for spec in all_option_specs()]
    neuron = json.loads(run_lmi_build("config", "options", "--json", "-t", "neuronx").stdout)
    by_key = {row["key"]: row for row in neuron}
    assert by_key["option.tensor_parallel_degree"]["default"] == "1"
    assert "option.max_input_len" not in by_key
    human = run_lmi_build("config", "options", "--target", "trtllm")
    assert human.returncode == 0 and "option.use_fused_mlp" in human.stdout


@pytest.mark.parametrize("command", ["show", "options"])
def test_help_has_an_example(command: str) -> None:
    result = run_lmi_build("config", command, "--help")
    assert result.returncode == 0
    assert f"lmi-build config {command}" in result.stdout


def test_bad_input_is_one_clean_line(tmp_path: Path) -> None:
    for args in (["--option", "novalue"], ["--target", "tpu"], ["--properties", str(tmp_path / "missing")]):
        result = subprocess.run(
            [sys.executable, "-m", "lmi_build", "config", "show", "--no-env", *args],
            capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_options_modules_stay_light() -> None:
    code = (
        "import sys\n"
        "from lmi_build.cli import config_cmd\n"
        "from lmi_build.options import OptionInputs, resolve_options\n"
        "resolve_options(OptionInputs(cli={'quantize': ('awq', '--option')}), target='trtllm')\n"
        "heavy = [m for m in ('torch', 'transformers', 'modelopt', 'boto3', 'huggingface_hub') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
