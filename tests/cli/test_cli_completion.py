"""Shell completion works (issue: ``--install-completion`` was disabled): the root offers
--install-completion/--show-completion, and the completion protocol knows every command and flag
although a normal command line loads only the command it names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _complete(words: str, cword: int) -> list[str]:
    env = {**os.environ, "_LMI_BUILD_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    result = subprocess.run([sys.executable, "-c", "from lmi_build.cli import main; main()"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize(("words", "cword", "expected"), [
    ("lmi-build pl", 1, "plan"),
    ("lmi-build de", 1, "demo"),
    ("lmi-build trtllm --max-in", 2, "--max-input-len"),
    ("lmi-build profiles s", 2, "show"),
])
def test_completion_knows_every_command_and_flag(words: str, cword: int, expected: str) -> None:
    assert expected in _complete(words, cword)


def test_show_completion_prints_the_script() -> None:
    import shutil

    console_script = shutil.which("lmi-build")  # the installed command, as a user's shell runs it
    assert console_script is not None
    # typer detects the shell from the parent processes: run it from bash (the trailing command keeps
    # bash from exec-ing lmi-build in its place, which would hide it).
    result = subprocess.run(["bash", "-c", f"'{console_script}' --show-completion; exit $?"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "_LMI_BUILD_COMPLETE" in result.stdout
