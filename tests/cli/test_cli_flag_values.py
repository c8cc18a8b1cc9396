"""A value a typed flag cannot take is one line naming the values it takes, exit 1, before any plan is
printed (issue 30 item 4): `--quantize awk` printed a 79-line plan and exited 2, `--tp two` printed
the plan and warned that option.tensor_parallel_degree=two "is rewritten" (untrue). `--quantize`
offers and takes what the command's target builds, not the container's runtime quantizations."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    env["COLUMNS"] = "80"
    return run_lmi_build(*args, env=env, timeout=300)


# (target, flag, value, a value the one line must name as accepted)
BAD_VALUES = [
    ("trtllm", "--tp", "two", '"max"'),
    ("hf", "--tp", "0", "a positive integer"),
    ("trtllm", "--quantize", "awk", "awq, smoothquant, fp8, int8_wo, int4_wo"),
    ("trtllm", "--quantize", "bitsandbytes", "awq, smoothquant, fp8, int8_wo, int4_wo"),
    ("trtllm", "--quantize", "squeezellm", "int4_wo"),
    ("hf", "--quantize", "int8", "awq, gptq, fp8"),
    ("neuronx", "--quantize", "awq", "int8"),
    ("hf", "--dtype", "fp9", "bf16"),
    ("trtllm", "--max-input-len", "0", "greater than or equal to 1"),
    ("trtllm", "--max-output-len", "lots", "integer"),
    ("neuronx", "--max-batch-size", "-3", "greater than or equal to 1"),
    ("neuronx", "--n-positions", "0", "greater than or equal to 1"),
    ("neuronx", "--context-length-estimate", "abc", "positive integers separated by commas"),
    ("trtllm", "--instance-type", "g9.foo", "g5"),
    ("trtllm", "--instance-type", "g5.huge", "g5.12xlarge"),
]


@pytest.mark.parametrize(("target", "flag", "value", "accepted"), BAD_VALUES,
                         ids=[f"{t}{f}={v}" for t, f, v, _ in BAD_VALUES])
def test_a_bad_flag_value_is_one_line_before_any_plan(target: str, flag: str, value: str, accepted: str) -> None:
    result = run_cli("plan", target, "--model", "demo:tiny-llama", flag, value)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stdout == ""  # no plan
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and accepted in lines[0], result.stderr
    assert "rewritten" not in result.stderr


def test_a_build_command_refuses_a_method_its_target_does_not_build(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("trtllm", "--model", "demo:tiny-llama", "--quantize", "bitsandbytes", "--output", str(out),
                     "--json")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and "'--quantize'" in error["message"] and "fp8" in error["message"]
    assert error["hint"].endswith(" trtllm --help")  # the command's own help
    assert not out.exists()


@pytest.mark.parametrize(("command", "offered", "not_offered"), [
    ("trtllm", "awq, smoothquant, fp8, int8_wo, int4_wo", ("bitsandbytes", "squeezellm", "static_int8")),
    ("neuronx", "int8, static_int8", ("bitsandbytes", "squeezellm", "awq")),
    ("hf", "awq, gptq, fp8", ("bitsandbytes", "squeezellm", "smoothquant")),
])
def test_quantize_help_offers_what_the_target_builds(command: str, offered: str, not_offered: tuple[str, ...]) -> None:
    result = run_lmi_build(command, "--help", env={**os.environ, "COLUMNS": "400"})
    text = " ".join((result.stdout + result.stderr).replace("│", " ").split())
    quantize = text[text.index("--quantize"):text.index("Sets option.quantize")]
    assert f"One of: {offered}." in quantize
    assert not [word for word in not_offered if word in quantize]


def test_plan_help_lists_each_target_s_methods() -> None:
    result = run_lmi_build("plan", "--help", env={**os.environ, "COLUMNS": "400"})
    text = " ".join((result.stdout + result.stderr).replace("│", " ").split())
    assert ("One of: trtllm: awq, smoothquant, fp8, int8_wo, int4_wo; neuronx: int8, static_int8; "
            "hf: awq, gptq, fp8.") in text


def test_an_unparsable_option_value_is_an_error_not_a_rewrite() -> None:
    """The same value from -o (or serving.properties) is a plan error (exit 2, the plan printed, as
    documented), without the warning that it "is rewritten ... remove it to silence this"."""
    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "-o", "option.tensor_parallel_degree=two")
    assert result.returncode == 2
    assert "[invalid_value] option.tensor_parallel_degree=two" in result.stderr
    assert "option_rewritten" not in result.stderr
