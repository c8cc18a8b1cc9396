"""The README's offline Quick start block runs as written, line by line, on demo models only (a plain
``lmi-build`` line in this process, the others in bash: ``tests/cli_process.run_command_line``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cli_process import run_command_line
from tests.fixtures_hub import OfflineHub
from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
pytestmark = pytest.mark.slow


def offline_block() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start"):]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "the Quick start has no code block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith(". ")]


def test_the_offline_block_names_only_demo_models() -> None:
    for line in offline_block():
        for model in re.findall(r"--model (\S+)", line):
            assert model.startswith("demo:"), line


def test_the_offline_block_runs_as_written(tmp_path: Path, offline_hub: OfflineHub) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LMI_BUILD_CACHE": str(tmp_path / "cache")}
    for line in offline_block():
        result = run_command_line(line, cwd=tmp_path, env=env, timeout=600)
        assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"
