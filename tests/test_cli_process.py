"""The in-process runner the CLI tests use (tests/cli_process.run_lmi_build) gives what a separate
``python -m lmi_build`` gives: the same exit status, output and files, in the caller's working
directory and environment, within its timeout; the process runner applies resource limits."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build, run_lmi_build_process


def _both(tmp_path: Path, *args: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    environment = {**os.environ, "COLUMNS": "100", **(env or {})}
    (tmp_path / "in-process").mkdir()
    (tmp_path / "process").mkdir()
    in_process = run_lmi_build(*args, env=environment, cwd=tmp_path / "in-process", timeout=120)
    process = run_lmi_build_process(*args, env=environment, cwd=tmp_path / "process", timeout=120)
    return in_process, process


def _tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file()}


@pytest.mark.parametrize("args", [
    ("plan", "trtllm", "--model", "demo:tiny-llama", "--tp", "1"),
    ("plan", "neuronx", "--model", "demo:tiny-llama", "--json"),
    ("plan", "trtllm", "--modle", "demo:tiny-llama"),  # a usage error: one line, exit 1
    ("verify", "no-such-artifact", "--json"),
    ("--help",),
], ids=["plan", "plan-json", "usage-error", "verify-missing", "help"])
def test_an_in_process_run_prints_and_exits_as_the_console_script(tmp_path: Path, args: tuple[str, ...]) -> None:
    in_process, process = _both(tmp_path, *args)
    assert (in_process.returncode, in_process.stdout, in_process.stderr) == \
        (process.returncode, process.stdout, process.stderr)


def test_an_in_process_run_works_in_the_callers_directory_and_environment(tmp_path: Path) -> None:
    # A relative --save lands in the call's working directory; OPTION_* comes from the call's env.
    args = ("plan", "trtllm", "--model", "demo:tiny-llama", "--save", "plan.json", "--json")
    in_process, process = _both(tmp_path, *args, env={"OPTION_MAX_ROLLING_BATCH_SIZE": "48"})
    assert in_process.returncode == process.returncode == 0, in_process.stderr + process.stderr
    assert in_process.stdout == process.stdout
    assert '"option.max_rolling_batch_size": "48"' in in_process.stdout
    assert _tree(tmp_path / "in-process") == _tree(tmp_path / "process") != {}
    assert "OPTION_MAX_ROLLING_BATCH_SIZE" not in os.environ and Path.cwd() != tmp_path / "in-process"


def test_an_in_process_run_past_its_timeout_is_stopped(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", timeout=0.001, cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert run_lmi_build("--version").returncode == 0  # the next call runs as usual


def test_a_file_size_limit_applies_to_the_process(tmp_path: Path) -> None:
    # RLIMIT_FSIZE below the plan's size: the write fails with EFBIG, lmi-build says so in one line.
    limited = run_lmi_build_process("plan", "trtllm", "--model", "demo:tiny-llama", "--save", "plan.json",
                                    cwd=tmp_path, file_size_limit=64)
    assert limited.returncode == 1, limited.stderr
    assert "file-size limit" in limited.stderr and "Traceback" not in limited.stderr
