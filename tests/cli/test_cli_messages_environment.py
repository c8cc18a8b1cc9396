"""Messages name what the user gave and say what happened (issue 42, item 7 and 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build


@pytest.mark.parametrize("output", ["/proc/x", "/proc/x/y/z"])
@pytest.mark.parametrize("command", ["trtllm", "hf"])
def test_an_output_that_cannot_be_created_is_named(command: str, output: str) -> None:
    """``--output /proc/x`` said "No such file or directory: /proc/.x.lock", a file never named."""
    result = run_lmi_build(command, "--model", "demo:tiny-llama", "--tp", "1", "--output", output)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert f"cannot write {output}:" in line and ".lock" not in line, result.stderr


def test_pull_into_a_place_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    from lmi_build.errors import LmiBuildError
    from lmi_build.fs import directory_lock

    with pytest.raises(LmiBuildError, match=r"cannot write /proc/pulled: files cannot be created in /proc"), \
            directory_lock(Path("/proc/pulled")):
        pass
