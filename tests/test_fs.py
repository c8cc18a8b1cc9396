"""lmi_build.core.fs: atomic writes, stage-and-swap of directories, hard link or copy, umask permissions."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmi_build.core.fs import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    current_umask,
    link_mode,
    link_or_copy,
    link_tree,
    make_temp_dir,
    replace_directory,
    staged_directory,
)


@pytest.fixture(params=[0o022, 0o027])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under a known umask (restored afterwards)."""
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_current_umask_reads_the_process_umask(umask: int) -> None:
    assert current_umask() == umask
    assert os.umask(umask) == umask  # reading it left it as it was


def test_atomic_writes_get_umask_permissions_and_leave_no_temp_files(tmp_path: Path, umask: int) -> None:
    text = atomic_write_text(tmp_path / "a" / "notes.txt", "héllo\nworld\n")
    raw = atomic_write_bytes(tmp_path / "blob.bin", b"\x00\x01")
    data = atomic_write_json(tmp_path / "data.json", {"b": 1, "a": [1, 2]}, sort_keys=True)
    assert text.read_bytes() == "héllo\nworld\n".encode()
    assert raw.read_bytes() == b"\x00\x01"
    assert data.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    assert json.loads(atomic_write_json(data, [1], indent=None).read_text()) == [1]
    for path in (text, raw, data):
        assert mode_of(path) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "blob.bin", "data.json"]
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["notes.txt"]


def test_failed_check_leaves_the_old_file(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "f.txt", "old\n")

    def refuse(temp: Path) -> None:
        assert temp.read_text() == "new\n" and temp != target
        raise ValueError("does not read back")

    with pytest.raises(ValueError, match="read back"):
        atomic_write_text(target, "new\n", check=refuse)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_temp_dir_is_a_hidden_sibling_with_umask_permissions(tmp_path: Path, umask: int) -> None:
    work = make_temp_dir(tmp_path / "out" / "model", "work")
    assert work.parent == tmp_path / "out" and work.name.startswith(".model.work-")
    assert mode_of(work) == 0o777 & ~umask  # not mkdtemp's 0700


def test_staged_directory_swaps_in_with_umask_permissions(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "artifact"
    with staged_directory(target) as staging:
        assert staging.parent == tmp_path and not target.exists()
        (staging / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    assert mode_of(target) == 0o777 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_staged_directory_replaces_old_content_only_after_success(tmp_path: Path) -> None:
    target = tmp_path / "artifact"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_directory(target) as staging:
        (staging / "half.txt").write_text("half")
        assert (target / "old.txt").is_file()  # untouched while the new one is built
        raise RuntimeError("build failed")
    assert [p.name for p in target.iterdir()] == ["old.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]  # the staging dir is gone
    with staged_directory(target) as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]  # the old one was removed


def test_staged_directory_keep_existing_keeps_what_another_process_published(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with staged_directory(target, keep_existing=True) as staging:
        (staging / "mine.txt").write_text("mine")
        target.mkdir()  # another process finished first
        (target / "theirs.txt").write_text("theirs")
    assert [p.name for p in target.iterdir()] == ["theirs.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_replace_directory_puts_the_old_one_back_when_the_rename_fails(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    with pytest.raises(FileNotFoundError):
        replace_directory(tmp_path / "never-staged", target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_replace_directory_takes_the_place_of_an_empty_directory(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "x").write_text("x")
    (tmp_path / "out").mkdir()
    replace_directory(staged, tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["x"] and not staged.exists()


def test_link_mode_copy_copies_and_link_tree_links(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "w.bin").write_bytes(b"weights")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    with link_mode("copy"):
        assert link_or_copy(source / "run.sh", tmp_path / "copied.sh") == "copy"
    assert (tmp_path / "copied.sh").stat().st_ino != (source / "run.sh").stat().st_ino
    assert mode_of(tmp_path / "copied.sh") == 0o755
    destination = tmp_path / "dst"
    destination.mkdir()
    link_tree(source, destination)
    # Small files are copies: an edit through one path never reaches the other.
    assert (destination / "sub" / "w.bin").stat().st_ino != (source / "sub" / "w.bin").stat().st_ino
    assert (destination / "sub" / "w.bin").read_bytes() == b"weights"
    with pytest.raises(shutil.Error, match="refusing to overwrite"):
        link_tree(source, destination)  # files are never overwritten
