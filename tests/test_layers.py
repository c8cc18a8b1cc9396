"""The layer contract (pyproject [tool.importlinter], docs/DESIGN.md) holds, and fails on a planted
upward or cross-target import, or an import cycle inside a package: import-linter is run for real on a copy
of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

REPO = REPO_ROOT
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(root)})


def copy_package(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "lmi_build", tmp_path / "lmi_build", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(root: Path, module: str, line: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n\ndef _planted() -> None:\n    {line}\n")


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e '.[dev]')")
def test_the_tree_keeps_the_layer_contract(tmp_path: Path) -> None:
    result = lint(copy_package(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (pip install -e '.[dev]')")
@pytest.mark.parametrize(("module", "line", "expected"), [
    ("lmi_build.artifact.files", "from lmi_build.building.pipeline import run_plan  # noqa",
     "lmi_build.artifact is not allowed to import lmi_build.building"),
    ("lmi_build.options.spec", "from lmi_build.planning.plan import BuildPlan  # noqa",
     "lmi_build.options is not allowed to import lmi_build.planning"),
    ("lmi_build.artifact.verify", "from lmi_build.storage.publish import publish  # noqa",
     "lmi_build.artifact is not allowed to import lmi_build.storage"),
    ("lmi_build.targets.hf.build", "from lmi_build.targets.trtllm.steps import engine_steps  # noqa",
     "lmi_build.targets.hf is not allowed to import lmi_build.targets.trtllm"),
    ("lmi_build.cli.user_config", "from lmi_build.cli.plan_flags import with_knobs  # noqa",
     "No cycles are allowed in lmi_build.cli."),
], ids=["artifact->pipeline", "options->planning", "artifact->storage", "hf->trtllm", "cycle in cli"])
def test_a_planted_import_breaks_the_contract(module: str, line: str, expected: str, tmp_path: Path) -> None:
    root = copy_package(tmp_path)
    plant(root, module, line)
    result = lint(root)
    assert result.returncode != 0
    assert expected in result.stdout, result.stdout
