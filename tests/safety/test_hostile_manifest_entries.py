"""A manifest is checked against the artifact, never trusted because it parses (issue 32 items 4, 8, 11).

- An entry that leaves the artifact (``../../outside.txt``, an absolute path, a path through a linked
  directory) is an error wherever the manifest comes from: ``verify`` said "valid, 8 files".
- A planted ``<output>.build-logs`` link got a failed step's log written through it.
- ``verify --for-container`` read the architecture, format, engine version and NEFFs from the
  manifest's record: a file tampered with and the manifest re-hashed passed; a NEFF left out of the
  manifest gave "loads (0 NEFFs)"; a deeply nested neuron block a RecursionError traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_lmi_build
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
    from lmi_build.core.hashing import tree_digest

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
    assert "escapes the artifact" in result.stderr or "absolute" in result.stderr, result.stderr


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


# ---- item 4: the facts verify --for-container uses are read from the artifact's files ------------

def _rehash(artifact: Path, *, drop: str | None = None) -> None:
    """Make the manifest agree with the files again (sizes, SHA-256, its own digest), as someone who
    tampered with a file would; ``drop``: leave that file out of it."""
    from lmi_build.core.hashing import tree_digest

    path = artifact / "lmi-build.json"
    manifest = json.loads(path.read_text())
    files = []
    for entry in manifest["files"]:
        if entry["path"] == drop:
            continue
        data = (artifact / entry["path"]).read_bytes()
        files.append({**entry, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest["files"] = files
    manifest["total_bytes"] = sum(entry["size"] for entry in files)
    manifest["content_digest"] = tree_digest((entry["path"], entry["sha256"]) for entry in files)
    path.chmod(0o644)
    path.write_text(json.dumps(manifest))


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.chmod(0o644)
    path.write_text(json.dumps(data))


HF_PROFILE = "lmi-0.35.0-vllm-0.11.1"


@pytest.mark.parametrize(("edit", "says"), [
    (lambda config: config.update(architectures=["T5ForConditionalGeneration"]), "records architectures"),
    (lambda config: config.update(quantization_config={"quant_method": "awq"}), "records the checkpoint format"),
], ids=["architecture", "format"])
def test_an_hf_checkpoint_tampered_and_rehashed_is_refused(world: World, edit: Callable[[dict[str, Any]], None],
                                                           says: str) -> None:
    artifact = _built(world)
    _edit_json(artifact / "config.json", edit)
    _rehash(artifact)
    before = world.snapshot()
    result = world.run("verify", "out", "--for-container", HF_PROFILE)
    world.expect(result, code=2, before=before, says=says)


@pytest.fixture
def neuron_artifact(tmp_path: Path, neuron_standin: Callable[..., None]) -> Path:
    from tests.fixtures_neuronx import write_neuron_model

    neuron_standin()
    model = write_neuron_model(tmp_path / "model")
    out = tmp_path / "neuron-out"
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                      "--profile", NEURON_PROFILE, "--output", str(out), "--quiet")
    assert result.returncode == 0, (result.stdout + result.stderr)
    return out


NEURON_PROFILE = "lmi-0.30.0-neuronx-sdk2.20.1"


def _verify(*args: str) -> tuple[int, str]:
    completed = run_lmi_build("verify", *args, timeout=120)
    return completed.returncode, completed.stdout + completed.stderr


def test_a_neff_dropped_from_the_manifest_is_no_valid_start_up(neuron_artifact: Path) -> None:
    (neff,) = [p.relative_to(neuron_artifact).as_posix() for p in (neuron_artifact / "compiled").glob("*.neff")]
    _rehash(neuron_artifact, drop=neff)
    code, shown = _verify(str(neuron_artifact), "--for-container", NEURON_PROFILE)
    assert code == 2 and "Traceback" not in shown, shown
    assert "the manifest lists no compiled/*.neff" in shown, shown


def test_a_deeply_nested_neuron_block_is_an_error_not_a_recursion(neuron_artifact: Path) -> None:
    config = neuron_artifact / "config.json"
    config.chmod(0o644)
    text = config.read_text()
    config.write_text(text.replace('"neuron": {', '"neuron": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ', ', 1))
    _rehash(neuron_artifact)
    code, shown = _verify(str(neuron_artifact), "--for-container", NEURON_PROFILE)
    assert code == 2 and "Traceback" not in shown and "RecursionError" not in shown, shown[-2000:]


@pytest.mark.slow
def test_a_trtllm_engine_config_tampered_and_rehashed_is_refused(world: World, tmp_path: Path) -> None:
    world.env = {"PATH": f"{STANDINS_DIR}{os.pathsep}{os.environ['PATH']}", "STANDIN_TRTLLM_VERSION": "0.21.0rc1",
                 "LMI_BUILD_CACHE": str(tmp_path / "demo-cache")}
    built = world.run("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", "out", "--no-cache",
                      "--max-input-len", "256", "--max-output-len", "128")
    assert built.returncode == 0, built.stderr
    artifact = world.cwd / "out"
    (engine_config,) = [p for p in artifact.rglob("config.json") if "version" in json.loads(p.read_text())]
    _edit_json(engine_config, lambda config: config.update(version="0.12.0"))
    _rehash(artifact)
    before = world.snapshot()
    result = world.run("verify", "out")
    world.expect(result, code=2, before=before, says="the engine's TensorRT-LLM")
