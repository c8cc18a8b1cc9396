"""One CLI surface: the output options every command takes, errors in --json mode, exit codes,
tables that never cut an identifier, and library chatter kept off the console."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from lmi_build.options.spec import all_option_specs
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from tests.cli_process import run_lmi_build

ERROR_KEYS = {"code", "message", "hint"}


def _env(**extra: str) -> dict[str, str]:
    """This environment without the machine's LMI/HF/S3 settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPTION_", "HF_", "SM_", "AWS_")) and k != "TENSOR_PARALLEL_DEGREE"}
    return {**env, **extra}


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env=_env(**env), timeout=300)


def assert_json_error(result: subprocess.CompletedProcess[str], code: str, exit_code: int = 1) -> dict[str, Any]:
    """stdout is exactly one ``{"error": {code, message, hint}}`` object; stderr is the one line."""
    assert result.returncode == exit_code, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert set(data) == {"error"} and set(data["error"]) == ERROR_KEYS, data
    error: dict[str, Any] = data["error"]
    assert error["code"] == code and error["message"] and error["hint"], error
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert error["message"] in result.stderr and error["hint"] in result.stderr
    assert "Traceback" not in result.stderr
    return error


# --- one mechanism for --json/--quiet/--debug --------------------------------------------------


def _leaf_commands() -> list[tuple[str, Any]]:
    import typer

    from lmi_build.cli import app

    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            found.append((path, command))

    walk(typer.main.get_command(app), "")
    return found


def test_every_command_takes_the_output_options() -> None:
    commands = _leaf_commands()
    assert {"plan", "hf", "trtllm", "verify", "inspect", "publish", "pull", "config show", "config options",
            "recipes list", "recipes show", "profiles list", "profiles show"} <= {path for path, _ in commands}
    for path, command in commands:
        options = {opt: param for param in command.params for opt in getattr(param, "opts", [])}
        for flag in ("--json", "--quiet", "--debug"):
            assert flag in options, f"`lmi-build {path}` lacks {flag}"
            assert options[flag].is_eager, f"`lmi-build {path}` {flag} must apply before other flags"
        assert [p for p in command.params if "--endpoint-url" in getattr(p, "opts", [])] or path not in {
            "plan", "hf", "trtllm", "verify", "inspect", "publish", "pull"}, f"`lmi-build {path}` lacks --endpoint-url"


def test_a_command_cannot_redeclare_an_output_option() -> None:
    from lmi_build.cli.app import new_app

    app = new_app()
    with pytest.raises(TypeError, match="json_output"):
        @app.command("x")
        def _command(json_output: bool = False) -> None:
            """Never registered."""


def test_output_modes_apply_in_process_one_invocation_at_a_time() -> None:
    as_json = run_lmi_build("profiles", "list", "--json")
    assert as_json.returncode == 0 and isinstance(json.loads(as_json.stdout), list)
    # The next command line starts from human output again.
    human = run_lmi_build("profiles", "list")
    assert human.returncode == 0 and "TensorRT-LLM" in human.stdout and not human.stdout.startswith("[")
    quiet_then_json = run_lmi_build("profiles", "list", "-q", "--json")
    assert isinstance(json.loads(quiet_then_json.stdout), list)  # --json wins in either order
    assert run_lmi_build("profiles", "list", "--quiet").stdout == ""


@pytest.mark.parametrize("args", [
    ["--json", "plan", "trtllm", "--model", "demo:tiny-llama"],  # before the command name
    ["--json", "profiles", "list"],  # before a group
    ["profiles", "--json", "list"],  # between a group and its command
    ["-q", "profiles", "list", "--json"],  # --json wins wherever it is
    ["--json", "profiles", "list", "-q"],
], ids=" ".join)
def test_json_before_the_command_name_prints_json(args: list[str]) -> None:


    result = run_lmi_build(*args)
    assert result.returncode == 0, (result.stdout + result.stderr)
    assert isinstance(json.loads(result.stdout), list | dict)


@pytest.mark.parametrize("args", [["--quiet", "profiles", "list"], ["-q", "profiles", "list"],
                                  ["profiles", "-q", "list"]], ids=" ".join)
def test_quiet_before_the_command_name_prints_nothing(args: list[str]) -> None:
    result = run_lmi_build(*args)
    assert result.returncode == 0 and result.stdout == ""
    assert run_lmi_build("profiles", "list").stdout != ""  # the next command line is human again


def test_json_before_the_command_name_reports_a_usage_error_as_json() -> None:
    assert_json_error(run_cli("--json", "plan", "hf", "--model", "demo:tiny-llama", "--pp", "abc"), "usage")


def test_debug_before_or_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    for args in (["--debug", "plan", "hf", "--model", missing], ["plan", "hf", "--model", missing, "--debug"]):
        result = run_cli(*args)
        assert result.returncode != 0 and "Traceback" in result.stderr and "SourceError" in result.stderr, args
    plain = run_cli("plan", "hf", "--model", missing)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr and plain.stderr.count("\n") == 1


# --- errors in --json mode, exit codes ---------------------------------------------------------


def test_json_error_unknown_profile_is_bad_input() -> None:
    error = assert_json_error(run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--profile", "nosuch", "--json"),
                              "unknown_name")
    assert "nosuch" in error["message"] and "lmi-0.27.0-trtllm-0.8.0" in error["hint"]
    assert_json_error(run_cli("profiles", "show", "nosuch", "--json"), "unknown_name")
    assert_json_error(run_cli("recipes", "show", "nosuch", "--json"), "unknown_name")


def test_json_error_missing_model_dir(tmp_path: Path) -> None:
    error = assert_json_error(run_cli("hf", "--model", str(tmp_path / "nope"), "--output", str(tmp_path / "out"),
                                      "--json"), "source")
    assert str(tmp_path / "nope") in error["message"]
    assert not (tmp_path / "out").exists()


def test_json_error_malformed_properties_file(tmp_path: Path) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("option.model_id=demo:tiny-llama\noption.dtype=\\uZZZZ\n")
    error = assert_json_error(run_cli("plan", "hf", "--properties", str(properties), "--json"), "option")
    assert "\\u" in error["message"]


def test_json_error_unreachable_s3_endpoint() -> None:
    credentials = {"AWS_ACCESS_KEY_ID": "lmi-test", "AWS_SECRET_ACCESS_KEY": "lmi-test-secret",
                   "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    result = run_cli("plan", "hf", "--model", "s3://bucket/prefix", "--endpoint-url", "http://127.0.0.1:1", "--json",
                     **credentials)
    error = assert_json_error(result, "source")
    assert "http://127.0.0.1:1" in error["message"]
    assert "lmi-test-secret" not in result.stdout + result.stderr


@pytest.mark.parametrize("args", [
    ["plan", "hf", "--model", "demo:tiny-llama", "--pp", "abc", "--json"],  # a bad value, --json after it
    ["plan", "hf", "--json", "--model", "demo:tiny-llama", "--max-input-len", "0"],  # out of range
    ["plan", "hf", "--model", "demo:tiny-llama", "--no-such-flag", "--json"],  # fails before any value is read
    ["plan", "nosuchtarget", "--json"],
], ids=["bad-int", "out-of-range", "unknown-flag", "bad-choice"])
def test_json_error_bad_flag_value_is_a_usage_error_exit_1(args: list[str]) -> None:
    error = assert_json_error(run_cli(*args), "usage")
    assert "--help" in error["hint"]


def test_usage_error_without_json_is_one_line_on_stderr_only() -> None:
    result = run_cli("plan", "hf", "--model", "demo:tiny-llama", "--pp", "abc")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "'--pp'" in result.stderr and "Traceback" not in result.stderr


def test_an_invalid_plan_is_still_exit_2_with_the_plan() -> None:
    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "3", "--json")
    assert result.returncode == 2
    data = json.loads(result.stdout)
    assert data["valid"] is False and "error" not in data and data["errors"]


def test_error_classes_exit_codes() -> None:
    from lmi_build.core.errors import (
        InvalidPlan,
        OptionError,
        SourceError,
        UnknownName,
        UnsupportedTarget,
        VerifyError,
    )

    assert [e("x").exit_code for e in (OptionError, SourceError, UnknownName, UnsupportedTarget)] == [1, 1, 1, 1]
    assert InvalidPlan("x").exit_code == 2 and VerifyError("x").exit_code == 2


# --- tables never cut an identifier ------------------------------------------------------------


def _flattened(text: str) -> str:
    """Every cell's text joined up, so a value folded over several lines reads whole again."""
    return "".join(line.strip(" │┃║|") for line in text.splitlines())


def test_piped_tables_keep_identifiers_whole_at_80_columns() -> None:
    profiles = load_profiles()
    listed = run_cli("profiles", "list", COLUMNS="80")
    assert listed.returncode == 0, listed.stderr
    for profile in profiles:
        assert any(f" {profile.name} " in line for line in listed.stdout.splitlines()), profile.name
    shown = run_cli("profiles", "show", profiles[-2].name, COLUMNS="80")
    assert profiles[-2].image in shown.stdout

    options = run_cli("config", "options", COLUMNS="80")
    assert options.returncode == 0, options.stderr
    lines = options.stdout.splitlines()
    for spec in all_option_specs():
        assert any(line.lstrip().startswith(spec.key + " ") for line in lines), spec.key

    plan = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1", COLUMNS="80")
    assert plan.returncode == 0, plan.stderr
    default = get_profile(None)
    # The 89-character image URI is longer than the value column at 80: folded whole, never cut.
    assert default.image in _flattened(plan.stdout)
    for text in (listed.stdout, options.stdout, plan.stdout):
        assert "…" not in text


def test_tables_on_an_80_column_terminal_never_cut() -> None:
    from rich.console import Console

    from lmi_build.planning.render import render_plan
    from tests.fixtures_planning import plan_for

    plan = plan_for("trtllm", model="demo:tiny-llama", tp="1")
    buffer = io.StringIO()
    # As lmi-build's console prints (lmi_build/reporting/output.py): soft wrap, the terminal wraps a long line.
    Console(file=buffer, width=80, force_terminal=True, color_system=None, soft_wrap=True).print(render_plan(plan))
    text = buffer.getvalue()
    assert "…" not in text
    lines = text.splitlines()
    image = plan.toolchain.image
    assert image and any(line.split() == ["image", image] for line in lines)  # whole, never folded (issue 30 item 3)
    assert [line for line in lines if len(line) > 80] == [line for line in lines if image in line]
    for key in plan.options:
        # option keys whole, at the start of a line (``key=value``, or ``key`` then its value)
        assert any(line.lstrip().startswith((key + " ", key + "=")) for line in lines), key


# --- library chatter goes to the debug channel --------------------------------------------------


def _chatter() -> None:
    print("current rank: 0, tp rank: 0, pp rank: 0")
    print("Loading checkpoint shards:  50%|#####     | 1/2\rLoading checkpoint shards: 100%", file=sys.stderr)
    warnings.warn("a library UserWarning", UserWarning, stacklevel=1)
    logging.getLogger("transformers.modeling_utils").warning("Inserted 106 quantizers")


def test_library_output_goes_to_the_debug_channel(capsys: pytest.CaptureFixture[str]) -> None:
    from lmi_build.reporting import output

    quiet = output.set_mode(output.Mode.JSON)
    output.set_debugging(False)
    with quiet.library_output():
        _chatter()
        quiet.info("not shown in json mode")
    assert capsys.readouterr() == ("", "")

    human = output.set_mode(output.Mode.HUMAN)
    output.set_debugging(True)
    try:
        with human.library_output():
            _chatter()
            human.info("our own progress line")
    finally:
        output.reset()
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout belongs to results
    lines = captured.err.splitlines()
    assert "our own progress line" in lines
    for text in ("current rank: 0", "Loading checkpoint shards:  50%", "Loading checkpoint shards: 100%",
                 "UserWarning: a library UserWarning", "Inserted 106 quantizers"):
        assert any(line.startswith("debug: ") and text in line for line in lines), text


@pytest.mark.slow
def test_quantized_build_json_is_one_object_and_no_chatter(tmp_path: Path) -> None:
    # A short calibration: the test is about what reaches stdout/stderr, not the scales.
    result = run_cli("hf", "--model", "demo:tiny-llama", "--quantize", "fp8", "--output", str(tmp_path / "out"),
                     "--no-cache", "--json", OPTION_CALIB_SIZE="4", OPTION_CALIB_MAX_SEQ_LEN="32")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # exactly one JSON document: anything else on stdout fails here
    assert data["status"] == "artifact" and [s["name"] for s in data["steps"]][1] == "quantize"
    for chatter in ("current rank", "Inserted", "UserWarning", "Registered", "torch_dtype", "Loading checkpoint"):
        assert chatter not in result.stderr, result.stderr


def test_profiles_list_and_show_the_hf_containers() -> None:
    listed = json.loads(run_lmi_build("profiles", "list", "--json").stdout)
    hf = {p["name"]: p for p in listed if p["kind"] == "hf"}
    assert hf["lmi-0.35.0-vllm-0.11.1"]["vllm"] == "0.11.1" and hf["lmi-0.35.0-vllm-0.11.1"]["formats"]["awq"] == "awq"
    shown = run_lmi_build("profiles", "show", "lmi-0.29.0-lmi-dist-11.0.0")
    assert shown.returncode == 0 and "--quantize fp8: compressed_tensors" in shown.stdout and "--quantize smoothquant: not loadable" in shown.stdout and "source: djl-serving" in shown.stdout
