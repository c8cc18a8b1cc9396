"""The fork server the CLI tests run lmi-build through (tests/cli_process.py) gives what a fresh
``python -m lmi_build`` gives: the same exit status, output and files, in the caller's working
directory and environment, with its resource limits and timeout."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_process import _fork_server, _run_fresh, run_lmi_build


def _both(tmp_path: Path, *args: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    environment = {**os.environ, "COLUMNS": "100", **(env or {})}
    (tmp_path / "forked").mkdir()
    (tmp_path / "fresh").mkdir()
    forked = run_lmi_build(*args, env=environment, cwd=tmp_path / "forked", timeout=120)
    fresh = _run_fresh(list(args), environment, tmp_path / "fresh", 120, None, None)
    return forked, fresh


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
def test_a_forked_run_prints_and_exits_as_a_fresh_interpreter(tmp_path: Path, args: tuple[str, ...]) -> None:
    forked, fresh = _both(tmp_path, *args)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_the_child_works_in_the_callers_directory_and_environment(tmp_path: Path) -> None:
    # A relative --save lands in the call's working directory; OPTION_* comes from the call's env.
    args = ("plan", "trtllm", "--model", "demo:tiny-llama", "--save", "plan.json", "--json")
    forked, fresh = _both(tmp_path, *args, env={"OPTION_MAX_ROLLING_BATCH_SIZE": "48"})
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert forked.stdout == fresh.stdout
    assert '"option.max_rolling_batch_size": "48"' in forked.stdout
    assert _tree(tmp_path / "forked") == _tree(tmp_path / "fresh") != {}


def test_a_call_past_its_timeout_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", timeout=0.01, cwd=tmp_path)
    assert time.monotonic() - started < 30
    assert run_lmi_build("--version").returncode == 0  # the server still serves


def test_a_file_size_limit_applies_to_the_process(tmp_path: Path) -> None:
    # RLIMIT_FSIZE below the plan's size: the write fails with EFBIG, lmi-build says so in one line.
    limited = run_lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", "--save", "plan.json", cwd=tmp_path,
                           file_size_limit=64)
    assert limited.returncode == 1, limited.stderr
    assert "file-size limit" in limited.stderr and "Traceback" not in limited.stderr


def test_a_call_that_changes_what_the_interpreter_reads_at_start_up_runs_fresh() -> None:
    server = _fork_server()
    if server is None:
        pytest.skip("LMI_BUILD_TEST_FRESH=1 or no fork: every call runs fresh")
    assert server.differences(dict(os.environ)) == []
    assert server.serves({**os.environ, "OPTION_TENSOR_PARALLEL_DEGREE": "2", "HF_TOKEN": "x"})
    assert server.serves({**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"})  # what main() sets itself
    assert server.serves({**os.environ, "PYTHONBREAKPOINT": "0"})  # read by breakpoint(), when called
    assert not server.serves({**os.environ, "LC_ALL": "C"})
    assert not server.serves({**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert not server.serves({**os.environ, "TERMINAL_WIDTH": "40"})
