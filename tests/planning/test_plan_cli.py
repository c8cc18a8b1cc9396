"""``lmi-build plan`` end to end in a subprocess: exit codes, the JSON contract, human output,
and that neither ``--help`` nor ``plan`` imports torch or transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build
from tests.fixtures_planning import ModelDirFactory

LLAMA = "meta-llama--Llama-2-7b-hf"
JSON_KEYS = {"schema_version", "target", "recipe", "recipe_version", "model", "spec", "options", "option_sources",
             "build", "quantization", "memory", "toolchain", "cache_key", "valid", "errors", "warnings"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    env.pop("TENSOR_PARALLEL_DEGREE", None)
    env["COLUMNS"] = "200"  # rich wraps help at the terminal width
    return env


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env=_env(), timeout=120)


def test_valid_plan_json_exit_0(model_dir: ModelDirFactory) -> None:
    result = run_cli("plan", "trtllm", "--model", str(model_dir(LLAMA)), "--tp", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= JSON_KEYS
    assert data["valid"] is True and data["errors"] == [] and data["target"] == "trtllm"
    assert data["recipe"] == "llama" and data["options"]["option.tensor_parallel_degree"] == "2"
    assert data["memory"]["weight_bytes"] > 13e9 and data["cache_key"].startswith("sha256:")
    assert result.stderr == ""


def test_invalid_plan_json_exit_2(model_dir: ModelDirFactory) -> None:
    result = run_cli("plan", "trtllm", "--model", str(model_dir(LLAMA)), "--tp", "3",
                     "--max-input-len", "8000", "--json")
    assert result.returncode == 2, result.stderr
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert {e["code"] for e in data["errors"]} == {"tp_heads", "max_len_positions"}  # both, not the first
    for error in data["errors"]:
        assert set(error) == {"code", "message", "hint"} and error["hint"]


def test_other_errors_exit_1(tmp_path: Path) -> None:
    missing = run_cli("plan", "hf", "--model", str(tmp_path / "nope"), "--json")
    assert missing.returncode == 1
    # With --json the error is on stdout too, as the one JSON object there (and nothing else).
    assert json.loads(missing.stdout)["error"]["code"] == "source"
    assert "error:" in missing.stderr and "Traceback" not in missing.stderr
    unknown = run_cli("plan", "hf", "--model", str(tmp_path), "--instance-type", "g5.3xlarge")
    assert unknown.returncode == 1 and "g5.12xlarge" in unknown.stderr


def test_human_output_has_tables_and_hints(model_dir: ModelDirFactory) -> None:
    result = run_cli("plan", "neuronx", "--model", str(model_dir(LLAMA)), "--tp", "16")
    assert result.returncode == 2
    for heading in ("Model", "Build knobs", "serving.properties", "Memory", "cache key"):
        assert heading in result.stdout
    assert "[tp_neuron_degree]" in result.stderr and "->" in result.stderr


def test_help_has_examples() -> None:
    result = run_cli("plan", "--help")
    assert result.returncode == 0
    assert "lmi-build plan trtllm --model" in result.stdout and "--context-length-estimate" in result.stdout


_PROBE = """
import sys
from lmi_build.cli import main
sys.argv = ["lmi-build", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "transformers", "modelopt", "huggingface_hub", "boto3") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"], ["plan", "hf", "--json"],
                                  ["plan", "trtllm", "--quantize", "awq", "--json"],
                                  ["plan", "neuronx", "--json"]])
def test_help_and_plan_do_not_import_heavy_libraries(model_dir: ModelDirFactory, args: list[str]) -> None:
    if "plan" in args and "--help" not in args:
        args = [*args, "--model", str(model_dir(LLAMA))]
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                            env=_env(), timeout=120)
    heavy = next(line for line in result.stderr.splitlines() if line.startswith("HEAVY="))
    assert "torch" not in heavy and "transformers" not in heavy and "modelopt" not in heavy, heavy
