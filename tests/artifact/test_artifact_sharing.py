"""Outputs never share a writable file with the cache or with each other.

An artifact restored from the cache used to be hard links to the cache entry: appending a line to
one output's serving.properties changed the entry and every other output restored from it. Files are
now copy-on-write clones where the file system can, copies when small, and hard links only for large
payloads that are made read-only (and never for root, whom mode bits do not stop).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import lmi_build.core.fs as fs
from lmi_build.core.fs import freeze_shared, link_or_copy, link_tree
from tests.cli_process import run_lmi_build

pytestmark = pytest.mark.slow


def _lmi_build(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return run_lmi_build(*args, env={**os.environ, "LMI_BUILD_CACHE": str(cache)}, timeout=600)


def _writable_shared(first: Path, second: Path) -> list[str]:
    """Relative paths whose files in ``first`` and ``second`` are one inode that someone may write."""
    shared = []
    for path in first.rglob("*"):
        other = second / path.relative_to(first)
        if path.is_file() and other.is_file() and path.stat().st_ino == other.stat().st_ino \
                and (path.stat().st_mode & 0o222 or os.geteuid() == 0):
            shared.append(path.relative_to(first).as_posix())
    return shared


def test_editing_one_output_changes_neither_the_cache_nor_another_output(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "a"), "--json", cache=cache)
    assert first.returncode == 0, first.stderr
    second = _lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "b"), "--json", cache=cache)
    assert json.loads(second.stdout)["status"] == "cached", second.stderr
    entries = list((cache / "artifacts").iterdir())
    assert len(entries) == 1
    assert _writable_shared(tmp_path / "a", tmp_path / "b") == []
    assert _writable_shared(tmp_path / "b", entries[0]) == []

    before = (tmp_path / "b" / "serving.properties").read_bytes()
    with open(tmp_path / "a" / "serving.properties", "a", encoding="utf-8") as stream:
        stream.write("option.trust_remote_code=true\n")
    assert (tmp_path / "b" / "serving.properties").read_bytes() == before
    assert (entries[0] / "serving.properties").read_bytes() == before
    assert _lmi_build("verify", str(tmp_path / "b"), cache=cache).returncode == 0
    edited = _lmi_build("verify", str(tmp_path / "a"), cache=cache)
    assert edited.returncode == 2 and "serving.properties" in edited.stdout + edited.stderr

    third = _lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "c"), "--json", cache=cache)
    assert json.loads(third.stdout)["status"] == "cached", third.stderr
    assert "evicting" not in third.stderr
    assert (tmp_path / "c" / "serving.properties").read_bytes() == before


def test_small_files_are_never_shared(tmp_path: Path) -> None:
    source = tmp_path / "serving.properties"
    source.write_text("engine=Python\n")
    assert link_or_copy(source, tmp_path / "copy") in ("copy", "reflink")
    with open(tmp_path / "copy", "a", encoding="utf-8") as stream:
        stream.write("option.x=1\n")
    assert source.read_text() == "engine=Python\n"


def test_large_payloads_are_linked_read_only_and_the_users_files_are_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs, "SHARED_MIN_BYTES", 4)
    monkeypatch.setattr(fs, "_is_root", lambda: False)
    monkeypatch.setattr(fs, "_reflink", lambda src, dst: False)  # as on ext4/overlayfs
    produced = tmp_path / "produced"
    produced.mkdir()
    (produced / "rank0.engine").write_bytes(b"engine bytes")
    users = tmp_path / "model"
    users.mkdir()
    (users / "model.safetensors").write_bytes(b"user weights")
    staging = tmp_path / "staging"
    assert link_or_copy(produced / "rank0.engine", staging / "rank0.engine") == "link"
    assert link_or_copy(users / "model.safetensors", staging / "model.safetensors") == "link"
    user_inode = (users / "model.safetensors").stat()
    assert freeze_shared(staging, keep={(user_inode.st_dev, user_inode.st_ino)}) == 1
    assert not stat.S_IMODE((staging / "rank0.engine").stat().st_mode) & 0o222
    assert stat.S_IMODE((users / "model.safetensors").stat().st_mode) & 0o200, "the user's file keeps its mode"

    # A cache entry made from that output shares only the frozen payload; the user's file is copied.
    entry = tmp_path / "entry"
    link_tree(staging, entry, share_writable=False)
    assert (entry / "rank0.engine").stat().st_ino == (staging / "rank0.engine").stat().st_ino
    assert (entry / "model.safetensors").stat().st_ino != user_inode.st_ino


def test_root_never_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs, "SHARED_MIN_BYTES", 4)
    monkeypatch.setattr(fs, "_is_root", lambda: True)
    monkeypatch.setattr(fs, "_reflink", lambda src, dst: False)
    (tmp_path / "big").write_bytes(b"payload bytes")
    assert link_or_copy(tmp_path / "big", tmp_path / "placed") == "copy"


def _large_files_link(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fs, "SHARED_MIN_BYTES", 4)
    monkeypatch.setattr(fs, "_is_root", lambda: False)
    monkeypatch.setattr(fs, "_reflink", lambda src, dst: False)  # as on ext4/overlayfs


def test_a_writable_file_of_the_users_is_never_hard_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two outputs of one local model would share the user's writable weights: an edit through one
    output changed the other and the model. Read-only, it may be linked (nobody can edit it in place)."""
    _large_files_link(monkeypatch)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"user weights")
    info = weights.stat()
    with fs.users_files({(info.st_dev, info.st_ino)}):
        assert link_or_copy(weights, tmp_path / "a" / "model.safetensors") == "copy"
        assert link_or_copy(weights, tmp_path / "b" / "model.safetensors") == "copy"
        weights.chmod(0o444)
        assert link_or_copy(weights, tmp_path / "c" / "model.safetensors") == "link"
    assert link_or_copy(tmp_path / "a" / "model.safetensors", tmp_path / "d.bin") == "link"  # not the user's


def test_packaging_leaves_an_engine_dir_of_the_users_untouched(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--engine-dir ./bundle/engine` is the user's: its files are neither linked while writable nor
    made read-only by the packager (nothing outside the output is changed)."""
    from lmi_build.artifact.packager import package
    from tests.fixtures_artifact import HF, HF_LAYOUT, make_plan, make_record, write_source_model

    _large_files_link(monkeypatch)
    source = write_source_model(tmp_path / "model", remote_code=False)
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in source.rglob("*") if p.is_file()}
    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source, source_dir=tmp_path / "other",
                  output_dir=tmp_path / "out", record=make_record(), users_roots=(source,))
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in source.rglob("*") if p.is_file()} == modes
    assert (out / "model.safetensors").stat().st_ino != (source / "model.safetensors").stat().st_ino
