"""The flags that set an option take their help text and bounds from its table entry (cli/flag_help)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
import typer.main

from lmi_build.cli import app, flag_help
from lmi_build.cli.flag_help import FLAG_DESCRIPTIONS, build_choices, help_text
from lmi_build.options.spec import exact_spec, option_spec
from lmi_build.targets import every_knob, request_for
from tests.cli_process import run_lmi_build

# Which flag sets which LMI option: every knob's, the targets' own included.
FLAG_KEYS = {how.flag: how.option for _, how in every_knob() if how.option is not None}


def test_every_flag_that_sets_an_option_is_covered() -> None:
    # FLAG_KEYS is what PlanRequest.flag_options maps: every dedicated flag, and only those.
    request = request_for("hf", {"tp": "2", "pp": 1, "dtype": "fp16", "quantize": "int8", "max_input_len": 1,
                                 "max_output_len": 1, "max_batch_size": 1, "n_positions": 128,
                                 "context_length_estimate": "64", "revision": "main", "trust_remote_code": True})
    assert {flag for _, flag in request.flag_options().values()} == set(FLAG_KEYS)
    assert set(FLAG_KEYS.values()) == set(flag_help.HELP)
    assert all(exact_spec(key) is not None for key in FLAG_KEYS.values())


def _plan_params() -> dict[str, Any]:
    command = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    return {opt: param for param in command.params for opt in param.opts}


@pytest.mark.parametrize("flag", sorted(FLAG_KEYS))
def test_flag_help_and_bounds_are_the_table_entry(flag: str) -> None:
    spec = exact_spec(FLAG_KEYS[flag])
    assert spec is not None
    param = _plan_params()[flag]
    description = FLAG_DESCRIPTIONS.get(spec.key, spec.description)
    assert param.help == help_text(spec) and description.rstrip(".") in param.help
    if spec.type == "int" and spec.minimum is not None:
        assert param.min == spec.minimum
    if spec.maximum is not None and spec.type == "int":
        assert param.max == spec.maximum
    if spec.type != "int":
        assert param.min is None and param.max is None


def _plan_help() -> str:
    result = run_lmi_build("plan", "--help", env={**os.environ, "COLUMNS": "400"})  # wide: rich elides long help
    assert result.returncode == 0
    # Rich wraps the help column inside a box: drop the box and rejoin the words.
    return " ".join(result.stdout.replace("│", " ").split())


def test_plan_help_shows_the_table_defaults_and_choices() -> None:
    text = _plan_help()
    max_input_len = option_spec("max_input_len")
    dtype = option_spec("dtype")
    quantize = option_spec("quantize")
    assert max_input_len is not None and dtype is not None and quantize is not None
    assert f"Default: {max_input_len.default} (trtllm). Sets option.max_input_len." in text
    assert f"One of: fp16, bf16, fp32. Default: {dtype.default}. Sets option.dtype." in text
    # --quantize takes what each target builds, not every runtime quantization the containers know.
    methods = "; ".join(f"{target}: {', '.join(values)}" for target, values in flag_help.TARGET_CHOICES["option.quantize"].items())
    assert f"One of: {methods}. Sets option.quantize." in text and "squeezellm" not in methods
    assert "Default: 1; trtllm: max. Sets option.tensor_parallel_degree." in text  # per-target defaults
    # The old hand-written help advertised "auto", which the table (and so the planner) refuses.
    assert not re.search(r"--dtype\s+<str>\s+fp16 \(default\)", text)


def test_the_bounds_are_enforced_by_the_flag() -> None:
    result = run_lmi_build("plan", "hf", "--model", "demo:tiny-llama", "--max-input-len", "0")
    message = " ".join(result.stderr.replace("│", " ").split())
    assert result.returncode == 1 and "'--max-input-len': Input should be greater than or equal to 1" in message


def test_dtype_takes_exactly_what_the_build_makes() -> None:
    """--dtype offers and accepts the dtypes the planner builds (checks.DTYPES), not the container's
    whole list (int8 is LMI-Dist's; auto is no option.dtype value): --help, the flag and the build
    agree."""
    from lmi_build.planning.checks import DTYPES

    assert build_choices()["option.dtype"] == tuple(DTYPES)
    assert flag_help.CHOICES["option.dtype"] == tuple(DTYPES)
    param = _plan_params()["--dtype"]
    assert param.help is not None and "int8" not in param.help and "auto" not in param.help
    for refused in ("int8", "auto"):
        result = run_lmi_build("plan", "hf", "--model", "demo:tiny-llama", "--dtype", refused)
        assert result.returncode == 1 and "'--dtype'" in result.stderr, result.stderr
    for accepted in DTYPES:
        result = run_lmi_build("plan", "hf", "--model", "demo:tiny-llama", "--dtype", accepted, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["options"]["option.dtype"] == accepted


def test_a_flag_narrowed_to_a_value_its_option_refuses_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flag_help, "build_choices", lambda: {"option.dtype": ("fp16", "fp8")})
    spec = exact_spec("option.dtype")
    assert spec is not None
    with pytest.raises(ValueError, match="fp8"):
        flag_help.help_text(spec)
