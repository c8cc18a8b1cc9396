"""A manifest is checked against the artifact, never trusted because it parses (issue 32 items 8, 11).

- An entry that leaves the artifact (``../../outside.txt``, an absolute path, a path through a linked
  directory) is an error wherever the manifest comes from: ``verify`` said "valid, 8 files".
- A planted ``<output>.build-logs`` link got a failed step's log written through it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from tests.hostile import World, make_world
from tests.paths import STANDINS_DIR


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def _built(world: World) -> Path:
    built = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert built.returncode == 0, built.stderr
    return world.cwd / "out"


def _rewrite_manifest(artifact: Path, add: dict[str, object]) -> None:
    """Add a file entry and re-hash the manifest's own digest, as someone editing it on purpose would."""
    from lmi_build.hashing import tree_digest

    path = artifact / "lmi-build.json"
    manifest = json.loads(path.read_text())
    manifest["files"].append(add)
    manifest["total_bytes"] += int(add["size"])  # type: ignore[call-overload]
    manifest["content_digest"] = tree_digest((f["path"], f["sha256"]) for f in manifest["files"])
    path.chmod(0o644)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("entry", ["../../outside.txt", "/etc/hostname", "a/../../../outside.txt", "./x"])
def test_a_manifest_entry_outside_the_artifact_is_an_error(world: World, entry: str) -> None:
    artifact = _built(world)
    data = (world.root / "outside.txt").read_bytes()
    _rewrite_manifest(artifact, {"path": entry, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    before = world.snapshot()
    result = world.run("verify", "out")
    world.expect(result, code=2, before=before)
    assert "leaves the artifact" in result.stderr or "absolute" in result.stderr, result.stderr


def test_a_manifest_entry_through_a_linked_directory_is_an_error(world: World) -> None:
    """``sub -> ..`` inside the artifact: ``sub/outside.txt`` is a regular file only through the link."""
    artifact = _built(world)
    os.symlink(world.root, artifact / "sub")
    data = (world.root / "outside.txt").read_bytes()
    _rewrite_manifest(artifact, {"path": "sub/outside.txt", "size": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()})
    before = world.snapshot()
    result = world.run("verify", "out")
    # verify lists every problem, one error line each: the entry reached through the link, and the link.
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "missing file sub/outside.txt" in result.stderr, result.stderr
    assert "symbolic link in artifact: sub" in result.stderr, result.stderr
    assert world.snapshot() == before


PROFILE = "lmi-0.33.0-trtllm-0.21.0"


@pytest.mark.slow
def test_a_planted_build_logs_link_is_not_followed(world: World, tmp_path: Path) -> None:
    users = world.root / "users-dir"
    users.mkdir()
    (users / "precious.txt").write_text("mine\n")
    os.symlink(users, world.cwd / "out.build-logs")
    world.env = {"PATH": f"{STANDINS_DIR}{os.pathsep}{os.environ['PATH']}", "STANDIN_TRTLLM_VERSION": "0.21.0rc1",
                 "LMI_BUILD_CACHE": str(tmp_path / "demo-cache")}
    before = world.snapshot()
    result = world.run("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", "out", "--no-cache",
                       "--max-input-len", "256", "--max-output-len", "128", env={"STANDIN_MODE": "fail"})
    kept = [p.name for p in world.cwd.iterdir() if p.name.startswith("out.build-logs-")]
    world.expect(result, code=1, before=before, allowed=("demo-cache", *(f"work/{name}" for name in kept)))
    assert sorted(p.name for p in users.iterdir()) == ["precious.txt"], "a log was written through the link"
    assert len(kept) == 1, kept
    match = re.search(r"full log: (\S+\.log)", result.error_lines[0])
    assert match is not None and Path(match.group(1)).is_file(), result.error_lines[0]
    assert Path(match.group(1)).parent.parent.name == kept[0] or Path(match.group(1)).parent.name == kept[0]
    assert "left alone" in result.error_lines[0]
