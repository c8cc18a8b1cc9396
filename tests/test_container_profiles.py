"""A container release is one file in its target's package (docs/DESIGN.md, "New container release"):
every target's ``data/profiles/`` holds one cited file per release, and a file added there is a
profile that ``lmi-build profiles list`` and ``show`` know, with no code."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from lmi_build.core.container_profiles import PROFILES_ENV, ProfileError
from lmi_build.targets import TARGETS
from tests.cli_process import run_lmi_build
from tests.paths import REPO_ROOT

PROFILE_DIRS = {name: REPO_ROOT / "lmi_build" / "targets" / name / "data" / "profiles" for name in TARGETS}
PROFILE_FILES = [(name, path) for name, directory in PROFILE_DIRS.items() for path in sorted(directory.glob("*.toml"))]


@pytest.mark.parametrize("target", list(TARGETS))
def test_each_target_has_one_cited_file_per_release(target: str) -> None:
    files = sorted(path.stem for path in PROFILE_DIRS[target].glob("*.toml"))
    assert files, f"no release files in {PROFILE_DIRS[target]}"
    assert sorted(TARGETS[target].container_profiles()) == files  # every file parses, named as its file
    assert all(row.data["sources"] for row in TARGETS[target].profile_rows()), "every release names its sources"


@pytest.mark.parametrize(("target", "path"), PROFILE_FILES, ids=lambda value: getattr(value, "name", value))
def test_a_copied_release_file_is_listed(target: str, path: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    releases = tmp_path / target
    shutil.copytree(PROFILE_DIRS[target], releases)
    text = path.read_text(encoding="utf-8")
    assert f'name = "{path.stem}"' in text
    (releases / "lmi-9.9.9-scratch.toml").write_text(text.replace(f'name = "{path.stem}"', 'name = "lmi-9.9.9-scratch"'),
                                                   encoding="utf-8")
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    listed = run_lmi_build("profiles", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    kinds = {row["name"]: row["kind"] for row in json.loads(listed.stdout)}
    assert kinds["lmi-9.9.9-scratch"] == kinds[path.stem] == target
    assert "lmi-9.9.9-scratch" in run_lmi_build("profiles", "list", env={**os.environ, "COLUMNS": "200"}).stdout
    shown = run_lmi_build("profiles", "show", "lmi-9.9.9-scratch", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["name"] == "lmi-9.9.9-scratch"


def test_a_release_file_is_named_as_its_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(PROFILE_DIRS["hf"], tmp_path / "hf")
    source = next(iter(sorted((tmp_path / "hf").glob("*.toml"))))
    source.rename(tmp_path / "hf" / "renamed.toml")
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    with pytest.raises(ProfileError, match=rf"renamed\.toml is named '{source.stem}'"):
        TARGETS["hf"].container_profiles()


def test_the_design_checklist_names_files_that_exist() -> None:
    text = (REPO_ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    checklist = text.split("## New container release\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w./<>-]+(?:\.py|\.toml|\.json|/))`", checklist))
    assert len(named) > 10, named
    # lmi_build/targets/<target>/data/profiles/<name>.toml: each target's directory
    paths = {name.split("<name>")[0].replace("<target>", target) for name in named for target in TARGETS} - {""}
    missing = [name for name in sorted(paths)
               if not (REPO_ROOT / name).exists() and not (REPO_ROOT / "lmi_build" / name).exists()
               and not any(next(root.rglob(name), None) for root in (REPO_ROOT / "tests", REPO_ROOT / "lmi_build"))]
    assert not missing, missing


def test_a_release_is_shown_as_written() -> None:
    # A source's "[n_positions]" is text, not rich markup: it was swallowed from the human output.
    shown = run_lmi_build("profiles", "show", "lmi-0.26.0-neuronx-sdk2.16.0", env={**os.environ, "COLUMNS": "400"})
    assert shown.returncode == 0, shown.stderr
    assert "contexts [n_positions])" in shown.stdout
    assert shown.stdout.startswith("lmi-0.26.0-neuronx-sdk2.16.0  763104351884.dkr.ecr")  # the heading beside the name
