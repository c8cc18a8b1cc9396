"""Standing defaults from ~/.config/lmi-build/config.toml: profile, endpoint and cache, below flags
and the environment, named by `config show`, and never inside a saved plan's contract."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build

OLDER_TRTLLM = "lmi-0.30.0-trtllm-0.12.0"
NEWER_TRTLLM = "lmi-0.33.0-trtllm-0.21.0"


def _run(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPTION_", "HF_", "SM_", "AWS_", "LMI_BUILD_CONFIG"))}
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
                **extra})
    return run_lmi_build(*args, env=env, cwd=tmp_path, timeout=300)


def _write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xdg" / "lmi-build" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _profile_of(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    profile: str = json.loads(result.stdout)["toolchain"]["profile"]
    return profile


def test_profile_comes_from_the_file_and_the_flag_wins(tmp_path: Path) -> None:
    plan = ("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--json")
    assert _profile_of(_run(tmp_path, *plan)) == NEWER_TRTLLM  # no file: lmi-build's default
    path = _write_config(tmp_path, f'[trtllm]\nprofile = "{OLDER_TRTLLM}"\n')
    configured = _run(tmp_path, *plan)
    assert _profile_of(configured) == OLDER_TRTLLM
    assert _profile_of(_run(tmp_path, *plan, "--profile", NEWER_TRTLLM)) == NEWER_TRTLLM
    # The human output says where the profile came from.
    human = _run(tmp_path, *plan[:-1])
    assert human.returncode == 0 and f"profile {OLDER_TRTLLM} from {path}" in human.stderr, human.stderr
    # Another target's table does not leak into this one.
    assert _profile_of(_run(tmp_path, "plan", "hf", "--model", "demo:tiny-llama", "--json")) is None


def test_a_saved_plan_keeps_its_own_profile(tmp_path: Path) -> None:
    """The plan is the contract: the file of the host that builds it changes nothing."""
    saved = _run(tmp_path, "plan", "hf", "--model", "demo:tiny-llama", "--save", "plan.json", "--json")
    assert saved.returncode == 0, saved.stderr
    _write_config(tmp_path, '[hf]\nprofile = "lmi-0.35.0-vllm-0.11.1"\n')
    built = _run(tmp_path, "hf", "--plan", "plan.json", "--output", "out", "--no-cache", "--json")
    assert built.returncode == 0, built.stderr
    assert json.loads((tmp_path / "out" / "lmi-build.json").read_text())["plan"]["toolchain"]["profile"] is None


@pytest.mark.parametrize("text, expected", [
    ("colour = 'blue'\n", "unknown setting 'colour'"),
    ("[trtllm]\nimage = 'x'\n", "unknown setting 'trtllm.image'"),
    ("[trtllm]\nprofile = 'lmi-0.30.0-neuronx-sdk2.20.1'\n", "is not a trtllm profile"),
    ("endpoint_url = 'minio:9000'\n", "endpoint_url must be an http(s):// URL"),
    ("cache = '/tmp/cache'\n", "cache must be an s3://bucket/prefix URL"),
    ("cache = 's3://AKIAKEY:secretvalue@bucket/c/'\n", "a URL with credentials in it is refused"),
    ("[trtllm\n", "is not valid TOML"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    path = _write_config(tmp_path, text)
    result = _run(tmp_path, "plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1")
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert expected in result.stderr and str(path) in result.stderr, result.stderr
    assert "secretvalue" not in result.stderr and "Traceback" not in result.stderr


def test_endpoint_order_flag_then_environment_then_file(tmp_path: Path) -> None:
    """Each pull fails fast on a closed port; its message names the endpoint it used."""
    _write_config(tmp_path, 'endpoint_url = "http://127.0.0.1:9"\n')
    pull = ("pull", "s3://bucket/prefix/", "copy")
    assert "127.0.0.1:9" in _run(tmp_path, *pull).stderr
    from_env = _run(tmp_path, *pull, AWS_ENDPOINT_URL="http://127.0.0.1:7")
    assert "127.0.0.1:7" in from_env.stderr and "127.0.0.1:9" not in from_env.stderr, from_env.stderr
    from_flag = _run(tmp_path, *pull, "--endpoint-url", "http://127.0.0.1:5", AWS_ENDPOINT_URL="http://127.0.0.1:7")
    assert "127.0.0.1:5" in from_flag.stderr and "127.0.0.1:7" not in from_flag.stderr, from_flag.stderr


def test_matrix_takes_the_cache_from_the_file(tmp_path: Path) -> None:
    """(Without one, in the file or as --cache, a matrix runs with this host's local build cache:
    tests/fleet/test_fleet_local_faults.py.)"""
    (tmp_path / "builds.toml").write_text('[[build]]\ntarget = "hf"\nmodel = "demo:tiny-llama"\n')
    _write_config(tmp_path, 'cache = "s3://team/cache/"\nendpoint_url = "http://127.0.0.1:9"\n')
    configured = _run(tmp_path, "matrix", "builds.toml", "--json")
    # Planned, then stopped at the (closed) endpoint of the file's cache: the file gave both.
    assert configured.returncode == 1 and "127.0.0.1:9" in configured.stderr, configured.stderr


def test_config_show_names_the_file_and_its_values(tmp_path: Path) -> None:
    absent = json.loads(_run(tmp_path, "config", "show", "--json").stdout)
    assert absent["config_file"]["exists"] is False and absent["config_file"]["values"] == {}
    path = _write_config(tmp_path, f'cache = "s3://team/cache/"\n[trtllm]\nprofile = "{OLDER_TRTLLM}"\n')
    shown = _run(tmp_path, "config", "show", "--json")
    data = json.loads(shown.stdout)
    assert data["config_file"] == {"path": str(path), "exists": True,
                                   "values": {"cache": "s3://team/cache/", "trtllm.profile": OLDER_TRTLLM}}
    assert data["profile"] == OLDER_TRTLLM  # the plan it compares with is the configured profile's
    human = _run(tmp_path, "config", "show")
    assert f"standing defaults from {path}" in human.stderr, human.stderr


def test_lmi_build_config_names_another_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "team.toml"
    elsewhere.write_text(f'[trtllm]\nprofile = "{OLDER_TRTLLM}"\n')
    plan = ("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1", "--json")
    assert _profile_of(_run(tmp_path, *plan, LMI_BUILD_CONFIG=str(elsewhere))) == OLDER_TRTLLM
    gone = _run(tmp_path, *plan, LMI_BUILD_CONFIG=str(tmp_path / "nope.toml"))
    assert gone.returncode == 1 and "LMI_BUILD_CONFIG names" in gone.stderr, gone.stderr
