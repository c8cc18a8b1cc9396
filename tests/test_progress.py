"""Long steps show progress (issue: `trtllm --until checkpoint` was silent for its whole run), and
``--quiet``/``--json`` keep it off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _build(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmi_build", *flags, "trtllm", "--model", "demo:tiny-llama",
                           "--until", "checkpoint", "--no-cache", "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "COLUMNS": "120"})


def test_the_checkpoint_step_shows_bytes_written(tmp_path: Path) -> None:
    result = _build(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "writing the checkpoint" in result.stderr
    assert "kB" in result.stderr or "MB" in result.stderr or "bytes" in result.stderr


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_quiet_and_json_show_no_progress(tmp_path: Path, flag: str) -> None:
    result = _build(tmp_path, flag)
    assert result.returncode == 0, result.stderr
    assert "writing the checkpoint" not in result.stderr
    if flag == "--json":
        assert json.loads(result.stdout)["status"] == "checkpoint"


def test_watch_written_counts_what_appears(tmp_path: Path) -> None:
    import io
    import time

    from rich.console import Console

    from lmi_build.output import Mode, Output

    stream = io.StringIO()
    out = Output(mode=Mode.HUMAN)
    out._err = Console(file=stream, width=120)
    with out.watch_written("writing", tmp_path):
        (tmp_path / "a.bin").write_bytes(b"x" * 5000)
        time.sleep(0.7)
    assert "writing" in stream.getvalue() and "5.0" in stream.getvalue()
