"""Messages a first-hour user meets (issue 24 item 6): `verify`/`inspect` on an output a build stopped
at with exit 3 say what it lacks and the command that finishes it; `profiles show` of an unknown
name lists every kind of profile; an unknown flag suggests only a close one; a matrix that cannot be
planned prints a summary line then one line per problem and exits 1 when the cause is not the
matrix (the Hub unreachable)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_lmi_build, run_lmi_build_process
from tests.test_pipeline_build import no_gpu_path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPTION_", "HF_", "SM_", "AWS_")) and k != "TENSOR_PARALLEL_DEGREE"}
    return {**env, **extra}


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env=_env(**env), timeout=300)


def _json_error(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(result.stdout)["error"]
    return error


# --- verify / inspect on an exit-3 output ---------------------------------------------------------


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real trtllm build on a host without trtllm-build: exit 3, the checkpoint and plan.json."""
    out = tmp_path_factory.mktemp("stopped") / "x1"
    result = run_cli("trtllm", "--model", "demo:tiny-llama", "--output", str(out), "--json", PATH=no_gpu_path())
    assert result.returncode == 3, result.stderr
    return out, json.loads(result.stdout)["next_command"]


@pytest.mark.slow  # the trtllm checkpoint is converted with torch
@pytest.mark.parametrize("command", ["verify", "inspect", "publish"])
def test_an_exit_3_checkpoint_says_what_is_missing_and_the_build_s_own_next_command(
        stopped: tuple[Path, str], command: str) -> None:
    out, next_command = stopped
    destination = ["s3://bucket/x/"] if command == "publish" else []
    result = run_cli(command, str(out), *destination, "--json")
    assert result.returncode == 2, result.stderr
    error = _json_error(result)
    assert "build it with lmi-build" not in error["hint"] and "not an lmi-build artifact" not in error["hint"]
    assert "unfinished trtllm build" in error["message"] and "TensorRT-LLM engines" in error["message"]
    assert error["hint"].startswith(f"finish it with: {next_command};")  # the command the build printed
    assert "--runner docker" in error["hint"]  # and where that command can run


@pytest.mark.slow  # the trtllm checkpoint is converted with torch
def test_a_script_bundle_says_to_run_its_script_then_package(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    built = run_cli("trtllm", "--model", "demo:tiny-llama", "--runner", "script", "--output", str(bundle), "--json")
    assert built.returncode == 0, built.stderr
    next_command = json.loads(built.stdout)["next_command"]
    error = _json_error(run_cli("verify", str(bundle), "--json"))
    assert "build-engines.sh has not been run" in error["message"]
    assert error["hint"] == f"finish it with: {next_command}"
    (bundle / "engine").mkdir()
    (bundle / "engine" / "rank0.engine").write_bytes(b"x")  # the script ran: only packaging is left
    error = _json_error(run_cli("inspect", str(bundle), "--json"))
    assert "packaging" in error["message"] and "build-engines.sh" not in error["hint"]
    assert error["hint"] == "finish it with: " + next_command.split(") && ", 1)[1]


def test_a_directory_without_a_plan_keeps_the_plain_message(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path), "--json")
    assert result.returncode == 2 and "no lmi-build.json" in _json_error(result)["message"]


# --- profiles show -----------------------------------------------------------------------------------


def test_an_unknown_profile_lists_every_kind() -> None:
    from lmi_build.targets.hf.profiles import load_profiles as hf_profiles
    from lmi_build.targets.neuronx.profiles import load_profiles as neuron_profiles
    from lmi_build.targets.trtllm.profiles import load_profiles as trtllm_profiles

    result = run_cli("profiles", "show", "nope", "--json")
    assert result.returncode == 1
    error = _json_error(result)
    for profile in [*trtllm_profiles(), *neuron_profiles(), *hf_profiles()]:
        assert profile.name in error["hint"], profile.name
    assert "did you mean" not in error["message"]


def test_a_near_miss_profile_name_is_suggested() -> None:
    error = _json_error(run_cli("profiles", "show", "lmi-0.30.0-neuronx-sdk2.20", "--json"))
    assert "did you mean lmi-0.30.0-neuronx-sdk2.20.1?" in error["message"]


# --- unknown flags -----------------------------------------------------------------------------------


def test_an_unknown_flag_suggests_no_unrelated_flag() -> None:
    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--bogus")
    assert result.returncode == 1
    assert "--bogus" in result.stderr and "Possible options" not in result.stderr, result.stderr


@pytest.mark.parametrize(("typed", "expected"), [("--modle", "--model"), ("--dtyp", "--dtype"),
                                                 ("--instance", "--instance-type"), ("--quantise", "--quantize")])
def test_a_mistyped_flag_suggests_the_flag(typed: str, expected: str) -> None:
    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", typed, "x")
    assert f"(Possible options: {expected})" in result.stderr, result.stderr


def test_close_flags_compares_names_not_dashes() -> None:
    from lmi_build.cli import close_flags

    assert close_flags("--bogus", ["--gpu", "--model"]) == []
    assert close_flags("--tpp", ["--tp", "--gpu"]) == ["--tp"]


# --- matrix errors -----------------------------------------------------------------------------------

OFFLINE_MATRIX = """
[[build]]
target = "hf"
[build.matrix]
model = ["org-that-is-not/there-a", "org-that-is-not/there-b"]
"""


def test_an_unreachable_hub_is_exit_1_with_one_line_per_build(tmp_path: Path) -> None:
    matrix = tmp_path / "builds.toml"
    matrix.write_text(OFFLINE_MATRIX, encoding="utf-8")
    # An endpoint nothing listens on: the Hub is unreachable, as offline. A process of its own:
    # huggingface_hub reads these variables when it is imported.
    result = run_lmi_build_process("matrix", str(matrix), "--cache", "s3://bucket/cache", "--json", timeout=300,
                                   env=_env(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_ETAG_TIMEOUT="2",
                                            HF_HUB_DOWNLOAD_TIMEOUT="2"))
    assert result.returncode == 1, (result.returncode, result.stderr)
    error = _json_error(result)
    assert error["message"] == f"{matrix}: 2 error(s), nothing was built"
    assert len(error["details"]) == 2 and all("cannot reach the Hugging Face Hub" in d for d in error["details"])
    assert "check the network" in error["hint"]  # the cause's own hint
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"error: {matrix}: 2 error(s), nothing was built (")
    assert [line.strip() for line in lines[1:]] == error["details"]


def test_an_invalid_matrix_is_still_exit_2_one_line_per_problem(tmp_path: Path) -> None:
    matrix = tmp_path / "builds.toml"
    matrix.write_text("[[build]]\nmodel = 'demo:tiny-llama'\n\n[[build]]\ntarget = 'hf'\nmodel = 'demo:tiny-llama'\n"
                      "tp = 3\n", encoding="utf-8")
    result = run_cli("matrix", str(matrix), "--cache", "s3://bucket/cache")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {matrix}: 2 error(s), nothing was built (fix every listed build, then run the " \
                       "matrix again)"
    assert lines[1].startswith("  build[0]: target is missing") and lines[2].startswith("  build[1]: ")


def test_a_missing_matrix_file_is_exit_1(tmp_path: Path) -> None:
    result = run_cli("matrix", str(tmp_path / "nope.toml"), "--cache", "s3://bucket/cache", "--json")
    assert result.returncode == 1, result.stderr
    error = _json_error(result)
    assert error["details"] == [f"{tmp_path / 'nope.toml'} does not exist"] and "check the matrix file" in error["hint"]


# --- messages that misled (issue 30 item 6) and a default said where it comes from (item 7) ------


@pytest.mark.parametrize("command", ["inspect", "verify", "publish"])
def test_a_file_is_not_a_directory_not_a_corrupt_artifact(tmp_path: Path, command: str) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    destination = ["s3://bucket-a/x/"] if command == "publish" else []
    result = run_cli(command, str(readme), *destination, "--json")
    assert result.returncode == 1, result.stderr
    error = _json_error(result)
    assert error["message"] == f"{readme} is not a directory", error
    assert "corrupt" not in error["hint"] and "JSON" not in error["message"]


def test_a_profile_of_another_target_says_so_and_lists_this_target_s() -> None:
    from lmi_build.targets import get_target

    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--profile", "lmi-0.33.0-neuronx-sdk2.21.1")
    assert result.returncode == 1 and result.stdout == ""
    line = result.stderr.strip()
    assert "unknown" not in line and "is a neuronx container profile, not one of trtllm's" in line
    assert all(name in line for name in get_target("trtllm").container_profiles())


@pytest.mark.slow  # the trtllm checkpoint is converted with torch, in the test process
def test_a_script_bundle_is_not_called_a_stop(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    built = run_cli("trtllm", "--model", "demo:tiny-llama", "--runner", "script", "--output", str(bundle))
    assert built.returncode == 0, built.stderr
    result = run_cli("publish", str(bundle), "s3://bucket-a/x/", "--json")
    assert result.returncode == 2
    message = _json_error(result)["message"]
    assert "is a trtllm --runner script bundle, not an artifact" in message and "exit 3" not in message


def test_a_partial_kv_cache_fit_is_not_called_fits() -> None:
    """The plan printed "per device 114.5 GiB ...; ml.g5.12xlarge has 22.0 GiB usable: fits"."""
    result = run_cli("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--instance-type", "g5.xlarge",
                     "--max-batch-size", "100000", "--max-input-len", "1024", "--max-output-len", "1024")
    assert result.returncode == 0, result.stderr
    memory = " ".join(result.stdout[result.stdout.index("Memory"):].split("Convert step")[0].split())
    # The verdict is about loading (weights + activations); the KV cache is what the rest holds, in
    # tokens and in sequences at the planned length, fewer than the 100,000 the engine may batch.
    assert "g5.xlarge has 22.0 GiB usable: loads" in memory and "fits" not in memory.replace(" fit in it", ""), memory
    sequences = re.search(r"sequences ([\d,]+) of max_seq_len 2,048 fit in it at once", memory)
    assert sequences is not None and 0 < int(sequences.group(1).replace(",", "")) < 100_000, memory


def test_config_show_without_a_model_names_its_stand_in() -> None:
    data = json.loads(run_cli("config", "show", "--no-env", "--json").stdout)
    assert data["model"] is None and data["plan_differs_model"] == "demo:tiny-llama"
    human = run_cli("config", "show", "--no-env")
    assert "stand-in model demo:tiny-llama (not yours" in " ".join(human.stderr.split())


def test_max_output_len_help_and_plan_say_the_same_and_where_it_comes_from() -> None:
    plan = run_cli("plan", "trtllm", "--model", "demo:tiny-mistral", "--json")
    data = json.loads(plan.stdout)
    warning = next(w for w in data["warnings"] if w["code"] == "max_output_len_from_model")
    assert data["options"]["option.max_output_len"] == "3072"
    assert warning["message"].startswith("max_output_len 3072 = the model's 4096 positions - max_input_len 1024")
    assert "lmi-0.33.0-trtllm-0.21.0" in warning["message"]
    help_text = " ".join(run_cli("trtllm", "--help").stdout.replace("│", " ").split())
    assert "Default: 512 (trtllm)" not in help_text
    assert "the model's max positions minus max_input_len" in help_text
    older = json.loads(run_cli("plan", "trtllm", "--model", "demo:tiny-mistral", "--profile",
                               "lmi-0.30.0-trtllm-0.12.0", "--json").stdout)
    assert older["options"]["option.max_output_len"] == "512"  # "older profiles 512", as the help says
    assert "max_output_len_from_model" not in {w["code"] for w in older["warnings"]}
