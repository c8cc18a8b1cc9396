"""Hostile outputs and model directories: nothing lost, nothing linked in from outside, one line.

Every case runs the real CLI in a sandbox (``tests/hostile.py``) and asserts the exit status, one
error line without a traceback, no secret in any output, and that nothing outside the allowed
paths changed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.hostile import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


# ---- 1. --overwrite never deletes the model, the current directory, the cache or a parent ----

PROTECTED_OUTPUTS = [
    ("", "current directory"),
    (".", "current directory"),
    ("./", "current directory"),
    ("model", "model source"),
    ("./model", "model source"),
    ("model/", "model source"),
    ("model/sub", "inside the model source"),
    ("..", "current directory"),
    ("{root}", "current directory"),
    ("{cwd}", "current directory"),
    ("{cache}", "the cache"),
    ("{cache}/artifacts", "inside the cache"),
    ("{home}", "home directory"),  # the sandbox's HOME (tests/hostile.py), never the real one
    ("{home}/..", "refusing to replace"),
]


@pytest.mark.parametrize(("output", "says"), PROTECTED_OUTPUTS)
@pytest.mark.parametrize("overwrite", [True, False])
def test_output_that_holds_what_the_user_keeps_is_refused(world: World, output: str, says: str,
                                                          overwrite: bool) -> None:
    path = output.format(root=world.root, cwd=world.cwd, cache=world.cache, home=world.home)
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", path, "--no-cache",
                       *(["--overwrite"] if overwrite else []))
    world.expect(result, code=1, before=before, says=says)


def test_filesystem_root_is_refused_before_anything() -> None:
    """Checked in-process: no run, even of broken code, may ever be pointed at the real root."""
    from lmi_build.artifact.output_place import OutputPlaceError, check_output_place

    with pytest.raises(OutputPlaceError, match="filesystem root"):
        check_output_place(Path("/"), overwrite=True, protected={})


def test_output_is_the_models_parent_through_a_symlink(world: World) -> None:
    (world.root / "alias").symlink_to(world.cwd)
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", str(world.root / "alias"), "--overwrite",
                       "--no-cache")
    world.expect(result, code=1, before=before, says="refusing to replace")


def test_model_given_by_absolute_path_is_protected_too(world: World) -> None:
    before = world.snapshot()
    result = world.run("hf", "--model", str(world.model), "--output", str(world.model), "--overwrite",
                       "--no-cache")
    world.expect(result, code=1, before=before, says="model source")


@pytest.mark.parametrize("blocker", ["afile/sub", "afile/sub/deeper", "afile"])
def test_output_below_a_file_is_one_line(world: World, blocker: str) -> None:
    (world.cwd / "afile").write_text("a file, not a directory\n")
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", blocker, "--no-cache")
    world.expect(result, code=1, before=before)


def test_overwrite_replaces_a_previous_artifact_only(world: World) -> None:
    first = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert first.returncode == 0, first.stderr
    (world.cwd / "out" / "stray.txt").write_text("old\n")
    before = world.snapshot()
    again = world.run("hf", "--model", "./model", "--output", "out", "--no-cache", "--overwrite")
    world.expect(again, code=0, before=before, allowed=("work/out",))
    assert not (world.cwd / "out" / "stray.txt").exists()
    assert not [p.name for p in world.cwd.iterdir() if p.name.startswith(".")], "no hidden leftovers"


# ---- 1. one writer per output; a killed build's leftovers are cleaned ----

def test_second_build_into_a_locked_output_fails_fast(world: World) -> None:
    from lmi_build.core.fs import (
        directory_lock,  # imported here: the before/after count runs these on main too
    )

    before = world.snapshot()
    with directory_lock(world.cwd / "out"):
        result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    world.expect(result, code=1, before=before, says="another build is writing")
    assert not (world.cwd / "out").exists()


def test_two_concurrent_builds_never_both_succeed(world: World) -> None:
    first = world.start("hf", "--model", "./model", "--output", "out", "--no-cache")
    second = world.start("hf", "--model", "./model", "--output", "out", "--no-cache")
    codes = [first.wait(timeout=180), second.wait(timeout=180)]
    for process in (first, second):
        assert process.stderr is not None
        assert "Traceback" not in process.stderr.read()
    assert sorted(codes) == [0, 1], codes


@pytest.mark.parametrize("label", ["work", "staging", "old"])
def test_leftovers_of_a_killed_build_are_removed(world: World, label: str) -> None:
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    stale = world.cwd / f".out.{label}-{dead_pid}-abcd1234"
    (stale / "engine").mkdir(parents=True)
    (stale / "engine" / "rank0.engine").write_bytes(b"x" * 1024)
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert not stale.exists(), "a dead build's hidden directory must not stay forever"


def test_a_live_builds_work_directory_is_left_alone(world: World) -> None:
    live = world.cwd / f".out.work-{os.getpid()}-abcd1234"
    live.mkdir()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert live.is_dir()


# ---- 2. symbolic links never carry outside files into an artifact ----

@pytest.mark.parametrize("name", ["tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                                  "model.safetensors", "generation_config.json"])
@pytest.mark.parametrize("command", ["hf", "plan"])
def test_link_to_a_file_outside_the_model_is_refused(world: World, name: str, command: str) -> None:
    secret_file = world.root / "secret-file"
    secret_file.write_text("root:x:0:0:secret\n")
    (world.model / name).unlink()
    (world.model / name).symlink_to(secret_file)
    before = world.snapshot()
    args = ("plan", "hf", "--model", "./model") if command == "plan" else \
        ("hf", "--model", "./model", "--output", "out", "--no-cache")
    result = world.run(*args)
    world.expect(result, code=1, before=before, says="symbolic link")
    assert not (world.cwd / "out").exists()


def test_linked_directory_leaving_the_model_is_refused(world: World) -> None:
    (world.root / "elsewhere").mkdir()
    (world.model / "extra").symlink_to(world.root / "elsewhere")
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    world.expect(result, code=1, before=before, says="symbolic link")


def test_link_inside_the_model_is_fine(world: World) -> None:
    shutil.copy(world.model / "tokenizer_config.json", world.model / "real_tokenizer_config.json")
    (world.model / "tokenizer_config.json").unlink()
    (world.model / "tokenizer_config.json").symlink_to("real_tokenizer_config.json")
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache")
    assert result.returncode == 0, result.stderr
    assert not (world.cwd / "out" / "tokenizer_config.json").is_symlink()


# ---- 11. artifacts readable by a serving user ----

def test_artifact_modes_follow_the_umask(world: World) -> None:
    (world.model / "model.safetensors").chmod(0o600)  # as a library may leave it: the source is not ours
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache", "--copy")
    assert result.returncode == 0, result.stderr
    out = world.cwd / "out"
    assert out.stat().st_mode & 0o777 == 0o755
    for path in out.rglob("*"):
        mode = path.stat().st_mode & 0o777
        assert mode & 0o044 == 0o044, f"{path.name} is {oct(mode)}: a serving user cannot read it"
    assert (world.model / "model.safetensors").stat().st_mode & 0o777 == 0o600, "the source is untouched"
