"""`make install` picks the torch wheel on purpose (issue 24 item 9): the CPU wheel from PyTorch's CPU
index on a host without nvidia-smi, PyPI's default (CUDA) wheel on a host with one, TORCH=cpu|cuda
overriding; an unreachable CPU index falls back to the registry's wheel with a message (CI sees only a
package registry). Run for real through make, with a stand-in pip that records what it was asked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

REPO = REPO_ROOT
MAKE = shutil.which("make")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# Records each call; fails a call that names an index when FAIL_INDEX is set (the index unreachable).
FAKE_PIP = """#!/bin/sh
echo "$*" >> "$PIP_LOG"
if [ -n "$FAIL_INDEX" ]; then
  for arg in "$@"; do [ "$arg" = "--index-url" ] && exit 1; done
fi
exit 0
"""


def _install(tmp_path: Path, *make_args: str, nvidia_smi: bool = False, fail_index: bool = False
             ) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")  # make's $(BIN)/python target exists: no venv is created
    pip = venv / "bin" / "pip"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    path = tmp_path / "path"  # PATH holds nvidia-smi or nothing: what the Makefile detects
    path.mkdir()
    if nvidia_smi:
        smi = path / "nvidia-smi"
        smi.write_text("#!/bin/sh\nexit 0\n")
        smi.chmod(0o755)
    log = tmp_path / "pip.log"
    env = {"PATH": str(path), "PIP_LOG": str(log), **({"FAIL_INDEX": "1"} if fail_index else {})}
    assert MAKE is not None
    result = subprocess.run([MAKE, "-s", "-C", str(REPO), "install", f"VENV={venv}", *make_args],
                            capture_output=True, text=True, env=env, timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def test_a_host_without_nvidia_smi_gets_the_cpu_wheel(tmp_path: Path) -> None:
    result, calls = _install(tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls[0].split()[-3:] == ["torch==2.13.0", "--index-url", CPU_INDEX]
    assert calls[1] == "install -q -e .[convert,dev,fleet]" and len(calls) == 2


def test_a_host_with_nvidia_smi_gets_the_default_cuda_wheel(tmp_path: Path) -> None:
    result, calls = _install(tmp_path, nvidia_smi=True)
    assert result.returncode == 0, result.stderr
    assert calls[0] == "install -q torch==2.13.0" and "CUDA" in result.stdout


@pytest.mark.parametrize(("override", "nvidia_smi", "index"), [("TORCH=cpu", True, True), ("TORCH=cuda", False, False)])
def test_torch_overrides_the_detection(tmp_path: Path, override: str, nvidia_smi: bool, index: bool) -> None:
    result, calls = _install(tmp_path, override, nvidia_smi=nvidia_smi)
    assert result.returncode == 0, result.stderr
    assert ("--index-url" in calls[0].split()) is index


def test_an_unreachable_cpu_index_falls_back_to_the_registry_and_says_so(tmp_path: Path) -> None:
    result, calls = _install(tmp_path, fail_index=True)
    assert result.returncode == 0, result.stderr
    assert "--index-url" in calls[0] and calls[1] == "install -q torch==2.13.0"
    assert calls[2].startswith("install -q -e ")
    assert f"{CPU_INDEX} could not be used" in result.stderr and "package registry" in result.stderr


def test_an_unknown_torch_choice_is_refused(tmp_path: Path) -> None:
    result, calls = _install(tmp_path, "TORCH=rocm")
    assert result.returncode != 0 and "use TORCH=cpu or TORCH=cuda" in result.stderr
    assert calls == []
