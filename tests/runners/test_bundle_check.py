"""build-engines.sh --check, and the same check at its start (issue 24 item 5): on a host given only
STAND-IN docker / nvidia-smi executables (written here, each saying it is a stand-in), every
requirement is printed ok or missing with its fix, and a missing one exits non-zero before any step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lmi_build.runners.bundle import finished_output
from lmi_build.targets.trtllm.profiles import get_profile
from tests.cli_process import run_lmi_build, run_lmi_build_process

PROFILE = "lmi-0.33.0-trtllm-0.21.0"
IMAGE = get_profile(PROFILE).image
REGISTRY = "763104351884.dkr.ecr.us-west-2.amazonaws.com"
# The tools the script's check uses besides docker and nvidia-smi (sh builtins aside).
TOOLS = ("sh", "grep", "tr", "head", "ls", "cat")

DOCKER = """#!/bin/sh
# STAND-IN for docker, for lmi-build's tests only (tests/runners/test_bundle_check.py): it runs nothing.
case "$1" in
  info)
    [ "${STANDIN_DOCKER_DAEMON:-up}" = up ] || { echo "Cannot connect to the Docker daemon (STAND-IN)" >&2; exit 1; }
    echo "Server: STAND-IN"
    echo " Runtimes: ${STANDIN_DOCKER_RUNTIMES:-io.containerd.runc.v2 nvidia runc}" ;;
  image) exit 1 ;;  # no image pulled on this stand-in host
  *) echo "docker STAND-IN: $*" >&2; exit 1 ;;
esac
"""
NVIDIA_SMI = """#!/bin/sh
# STAND-IN for nvidia-smi, for lmi-build's tests only (tests/runners/test_bundle_check.py).
case "$*" in
  *--query-gpu=compute_cap,name*) echo "${STANDIN_COMPUTE_CAP:-9.0}, STAND-IN NVIDIA GPU" ;;
  *-L*) echo "GPU 0: STAND-IN NVIDIA GPU (UUID: GPU-0)" ;;
  *) echo "nvidia-smi STAND-IN" ;;
esac
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build-engines.sh bundle for a g5 plan (A10G: sm86), the model converted on the GPU host."""
    where = tmp_path_factory.mktemp("bundle-check")
    out = where / "bundle"
    result = _cli("trtllm", "--model", "demo:tiny-gpt2", "--profile", PROFILE, "--instance-type", "ml.g5.12xlarge",
                  "--tp", "1", "--runner", "script", "--output", str(out), "--json", cwd=where)
    assert result.returncode == 0, result.stderr
    (out / "TensorRT-LLM" / "examples" / "gpt").mkdir(parents=True)  # where the script expects the checkout
    (out / "TensorRT-LLM" / "examples" / "gpt" / "convert_checkpoint.py").write_text("# STAND-IN\n")
    return out


def _host(tmp_path: Path, *, docker: bool = True, gpu: bool = True, login: bool = True) -> dict[str, str]:
    """The environment of a host that has exactly these stand-ins (and the plain tools) on PATH."""
    tools, standins = tmp_path / "tools", tmp_path / "standins"
    tools.mkdir()
    standins.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    for name, text, wanted in (("docker", DOCKER, docker), ("nvidia-smi", NVIDIA_SMI, gpu)):
        if wanted:
            (standins / name).write_text(text)
            (standins / name).chmod(0o755)
    config = tmp_path / "docker-config"
    config.mkdir()
    if login:
        (config / "config.json").write_text(json.dumps({"auths": {REGISTRY: {}}}))
    return {"PATH": f"{standins}{os.pathsep}{tools}", "DOCKER_CONFIG": str(config), "HOME": str(tmp_path),
            "STANDIN_COMPUTE_CAP": "8.6"}


def _script(bundle: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "./build-engines.sh", *args], cwd=bundle, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def _lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """requirement -> "ok" / "missing"."""
    status: dict[str, str] = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("ok", "missing"):
            status[rest.strip()] = word
    return status


def test_a_host_with_everything_passes_the_check(bundle: Path, tmp_path: Path) -> None:
    result = _script(bundle, _host(tmp_path), "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    status = _lines(result)
    assert set(status.values()) == {"ok"}, result.stdout
    wanted = ["docker installed", "the docker daemon reachable", f"a docker login for {REGISTRY}",
              "the NVIDIA container runtime", "the model directory MODEL_DIR", "the examples directory TRTLLM_EXAMPLES",
              "a GPU of sm86 (the plan's instance type ml.g5.12xlarge) (found sm86, STAND-IN NVIDIA GPU)"]
    for requirement in wanted:
        assert any(line.startswith(requirement) for line in status), (requirement, result.stdout)
    assert not (bundle / "engine").exists() and not (bundle / "build-logs").exists()  # --check runs no step


@pytest.mark.parametrize(("host", "extra", "missing", "fix"), [
    ({"docker": False}, {}, "docker installed", "install Docker Engine"),
    ({}, {"STANDIN_DOCKER_DAEMON": "down"}, "the docker daemon reachable", "sudo systemctl start docker"),
    ({}, {"STANDIN_DOCKER_RUNTIMES": "io.containerd.runc.v2 runc"}, "the NVIDIA container runtime",
     "sudo nvidia-ctk runtime configure --runtime=docker"),
    ({"login": False}, {}, f"a docker login for {REGISTRY}",
     f"aws ecr get-login-password --region us-west-2 | docker login --username AWS --password-stdin {REGISTRY}"),
    ({"gpu": False}, {}, "a GPU of sm86", "an NVIDIA GPU and its driver"),
    ({}, {"STANDIN_COMPUTE_CAP": "9.0"}, "a GPU of sm86 (the plan's instance type ml.g5.12xlarge) (found sm90",
     "build on a sm86 GPU"),
], ids=["no-docker", "daemon-down", "no-nvidia-runtime", "no-registry-login", "no-gpu", "other-sm"])
def test_each_missing_requirement_is_named_with_its_fix(bundle: Path, tmp_path: Path, host: dict[str, bool],
                                                        extra: dict[str, str], missing: str, fix: str) -> None:
    env = {**_host(tmp_path, **host), **extra}
    result = _script(bundle, env, "--check")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"missing  {missing}"))
    assert lines[at + 1].strip().startswith("fix: ") and fix in lines[at + 1], result.stdout


def test_a_run_checks_first_and_stops_before_any_step(bundle: Path, tmp_path: Path) -> None:
    result = _script(bundle, {**_host(tmp_path), "STANDIN_DOCKER_DAEMON": "down"})
    assert result.returncode == 1
    assert "missing  the docker daemon reachable" in result.stdout and "--check" in result.stderr
    assert not (bundle / "engine").exists() and not (bundle / "build-logs").exists()
    (tmp_path / "other").mkdir()
    assert _script(bundle, _host(tmp_path / "other"), "--bogus").returncode == 2


def test_runner_local_checks_the_tools_on_path_not_docker(bundle: Path, tmp_path: Path) -> None:
    result = _script(bundle, {**_host(tmp_path, docker=False), "RUNNER": "local"}, "--check")
    assert result.returncode == 1
    status = _lines(result)
    assert not any(line.startswith("docker") for line in status)
    assert status["trtllm-build on PATH"] == "missing" and "install TensorRT-LLM 0.21.0rc1" in result.stdout


def test_the_finishing_output_never_doubles_the_suffix(tmp_path: Path) -> None:
    assert finished_output(tmp_path / "x1") == tmp_path / "x1-artifact"
    assert finished_output(tmp_path / "x1-artifact") == tmp_path / "x1-artifact-2"
    assert finished_output(tmp_path / "x1-artifact-2") == tmp_path / "x1-artifact-3"


# ---- the script finds its bundle from any directory (issue 30 item 5) ----

@pytest.fixture(scope="module")
def demo_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The README's two bundles of demo:tiny-llama: build-engines.sh with the checkpoint converted here,
    build-neffs.sh with driver/ and model/; script name -> its path."""
    where = tmp_path_factory.mktemp("bundle-cwd")
    scripts: dict[str, Path] = {}
    for target, output, script in (("trtllm", "b", "build-engines.sh"), ("neuronx", "nx-bundle", "build-neffs.sh")):
        # Its own process: the trtllm bundle's checkpoint is converted with torch, which these tests
        # (in make test-fast) keep out of the test process.
        result = run_lmi_build_process(target, "--model", "demo:tiny-llama", "--runner", "script", "--output", output,
                                       "--json", cwd=where, timeout=600)
        assert result.returncode == 0, result.stderr
        scripts[script] = where / output / script
    return scripts


# what each bundle's steps read, all inside the bundle
BUNDLED = {"build-engines.sh": ("the checkpoint directory CHECKPOINT_DIR",),
           "build-neffs.sh": ("the driver directory DRIVER_DIR", "the model directory MODEL_DIR")}


def _directory_lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """requirement -> "ok" / "missing", for the directory requirements (the rest depends on the host)."""
    return {what.split(" (", 1)[0]: status for what, status in _lines(result).items() if " directory " in what}


@pytest.mark.parametrize("script", sorted(BUNDLED))
@pytest.mark.parametrize("where", ["parent", "root", "bundle"])
def test_the_script_finds_its_bundle_from_any_directory(demo_bundles: dict[str, Path], tmp_path: Path,
                                                       script: str, where: str) -> None:
    """`./b/build-engines.sh --check` as the README runs it (from the bundle's parent), from /, and
    from inside the bundle: every directory the steps read is found in the bundle."""
    path = demo_bundles[script]
    cwd, argv = {"parent": (path.parent.parent, [f"./{path.parent.name}/{script}"]),
                 "root": (Path("/"), [str(path)]),
                 "bundle": (path.parent, ["sh", f"./{script}"])}[where]
    result = subprocess.run([*argv, "--check"], cwd=cwd, env=_host(tmp_path), capture_output=True, text=True,
                            timeout=60, check=False)
    assert _directory_lines(result) == dict.fromkeys(BUNDLED[script], "ok"), result.stdout + result.stderr
    assert not (cwd / "build-logs").exists() and not (path.parent / "build-logs").exists()  # --check runs no step


def test_a_directory_set_by_the_caller_still_wins(demo_bundles: dict[str, Path], tmp_path: Path) -> None:
    """The defaults are the bundle's; a variable the caller sets is used as given (a relative one
    against the caller's current directory)."""
    path = demo_bundles["build-engines.sh"]
    env = _host(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "ckpt").mkdir(parents=True)
    (elsewhere / "ckpt" / "config.json").write_text("{}")
    found = subprocess.run([str(path), "--check"], cwd=elsewhere, env={**env, "CHECKPOINT_DIR": "ckpt"},
                           capture_output=True, text=True, timeout=60, check=False)
    assert _directory_lines(found) == {"the checkpoint directory CHECKPOINT_DIR": "ok"}, found.stdout
    assert "(ckpt)" in found.stdout
    missing = subprocess.run([str(path), "--check"], cwd=path.parent, env={**env, "CHECKPOINT_DIR": str(tmp_path / "none")},
                             capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1
    assert _directory_lines(missing) == {"the checkpoint directory CHECKPOINT_DIR": "missing"}, missing.stdout
