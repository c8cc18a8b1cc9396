"""docs/DESIGN.md's extension checklists stay true: the files they name exist, and a new model family is
one recipe file and no code (a scratch recipe in a temporary copy of the package is listed and planned).

The container-release checklist has its own tests in tests/test_container_profiles.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmi_build.recipes.registry import load_recipes
from lmi_build.targets import TARGETS
from tests.paths import FIXTURES_DIR, REPO_ROOT

DESIGN = REPO_ROOT / "docs" / "DESIGN.md"
# The modules DESIGN.md's "How a new target plugs in" names for every target package.
TARGET_MODULES = ("__init__.py", "target.py", "command.py", "knobs.py", "options.py", "plan.py", "build.py",
                  "layouts.py", "compatibility.py", "profiles.py")


def _section(title: str) -> str:
    text = DESIGN.read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_has_the_files_the_new_target_checklist_names(name: str) -> None:
    package = REPO_ROOT / "lmi_build" / "targets" / name
    section = _section("How a new target plugs in")
    for module in TARGET_MODULES:
        assert (package / module).is_file(), f"{name} lacks {module}"
        assert f"`{module}`" in section, f"the checklist does not name {module}"
    assert any((package / "data" / "profiles").glob("*.toml"))
    assert name in (REPO_ROOT / "lmi_build" / "core" / "target_names.py").read_text(encoding="utf-8")
    assert f'"lmi_build.targets.{name}"' in (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert any(name in recipe.targets for recipe in load_recipes().recipes)


def test_the_model_family_checklist_names_files_that_exist() -> None:
    named = re.findall(r"`((?:lmi_build|recipes|tests)/[\w/.<>-]+)`", _section("New model family"))
    assert named, "the checklist names no file"
    for path in named:
        if "<" not in path:  # a placeholder (recipes/<family>.toml) names a kind of file, not one
            assert (REPO_ROOT / path).exists(), f"DESIGN.md names {path}, which does not exist"


def test_a_new_recipe_file_is_a_new_family(tmp_path: Path) -> None:
    """Copy the package and its recipes, and make GPT-2's recipe a family of another name in a file of
    its own (nothing else changes): `recipes list` lists it and `plan trtllm` plans GPT-2 with it."""
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "_bundled")
    shutil.copytree(REPO_ROOT / "lmi_build", copy / "lmi_build", ignore=ignore)
    shutil.copytree(REPO_ROOT / "recipes", copy / "recipes", ignore=ignore)
    recipe = (copy / "recipes" / "gpt2.toml").read_text(encoding="utf-8")
    (copy / "recipes" / "gpt2.toml").unlink()
    (copy / "recipes" / "scratch.toml").write_text(recipe.replace('name = "gpt2"', 'name = "scratch"'),
                                                   encoding="utf-8")
    model = FIXTURES_DIR / "hf-configs" / "openai-community--gpt2"
    env = {**os.environ, "PYTHONPATH": str(copy), "LMI_BUILD_CACHE": str(tmp_path / "cache")}

    def lmi_build(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lmi_build", *args], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=120)

    listed = lmi_build("recipes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert Path(json.loads(listed.stdout)["directory"]) == copy / "recipes"
    assert "scratch" in {entry["name"] for entry in json.loads(listed.stdout)["recipes"]}
    planned = lmi_build("plan", "trtllm", "--model", str(model), "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["recipe"] == "scratch"
