"""Full disks and mount points: one line, nothing partial left, nothing replaced.

A full disk is a real small tmpfs where this host lets root mount one, and otherwise (and in
addition) a process whose RLIMIT_FSIZE is below the artifact's largest file (EFBIG instead of
ENOSPC). The mount-point cases need a real mount and skip, saying so, where none can be made.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures_s3 import S3Server
from tests.hostile import World, make_world

FULL_DISK = 256 * 1024  # bytes: below the 2 MiB weights of _heavy_weights
WEIGHTS_BYTES = 2 * 1024 * 1024


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


@contextmanager
def tmpfs(path: Path, size: int, *, read_only: bool = False) -> Iterator[Path]:
    """A real tmpfs of ``size`` bytes at ``path`` (unmounted afterwards), or a skip with the reason."""
    path.mkdir(parents=True, exist_ok=True)
    flags = f"size={size},mode=0755" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", flags, "tmpfs", str(path)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _heavy_weights(world: World) -> None:
    """Weights larger than the full disk (real safetensors; the hf build copies them as they are)."""
    from safetensors.numpy import save_file

    tensor = np.ones((WEIGHTS_BYTES // 2 // 1024, 1024), dtype=np.float16)
    save_file({"model.embed_tokens.weight": tensor}, str(world.model / "model.safetensors"), metadata={"format": "pt"})


# ---- 9. --overwrite onto a mount point ----

@pytest.mark.parametrize("spelling", ["out", "out/", "{abs}", "./out/."])
def test_overwrite_onto_a_mount_point_is_refused(world: World, spelling: str) -> None:
    with tmpfs(world.cwd / "out", 1024 * 1024) as mount:
        (mount / "keep.txt").write_text("on the mounted filesystem\n")
        before = world.snapshot()
        result = world.run("hf", "--model", "./model", "--output", spelling.format(abs=mount), "--overwrite",
                           "--no-cache")
        world.expect(result, code=1, before=before, says="mount point")
        assert (mount / "keep.txt").read_text() == "on the mounted filesystem\n"
        assert sorted(p.name for p in mount.iterdir()) == ["keep.txt"]


def test_new_directory_inside_a_mount_point_is_fine(world: World) -> None:
    with tmpfs(world.cwd / "mnt", 16 * 1024 * 1024) as mount:
        before = world.snapshot()
        result = world.run("hf", "--model", "./model", "--output", "mnt/artifact", "--no-cache")
        world.expect(result, code=0, before=before, allowed=("work/mnt/artifact",))
        assert (mount / "artifact" / "lmi-build.json").is_file()


# ---- 9. an output nobody can write (root included: a read-only filesystem) ----

@pytest.mark.parametrize("output", ["ro/out", "ro/a/b"])
def test_output_on_a_read_only_filesystem_is_one_line(world: World, output: str) -> None:
    with tmpfs(world.cwd / "ro", 1024 * 1024, read_only=True):
        before = world.snapshot()
        result = world.run("hf", "--model", "./model", "--output", output, "--no-cache")
        world.expect(result, code=1, before=before, says="not writable")


# ---- 9. ENOSPC (or EFBIG) while building ----

def _assert_nothing_partial(directory: Path) -> None:
    left = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
    assert not [name for name in left if name not in ("model", "a")], left  # a: the published artifact


def test_build_onto_a_full_tmpfs_is_one_line_and_leaves_nothing(world: World) -> None:
    _heavy_weights(world)
    with tmpfs(world.cwd / "disk", FULL_DISK) as disk:
        before = world.snapshot()
        result = world.run("hf", "--model", "./model", "--output", "disk/out", "--no-cache", "--copy")
        world.expect(result, code=1, before=before)
        assert "space" in result.error_lines[0].lower(), result.error_lines[0]
        assert list(disk.iterdir()) == [], "no partial artifact, work or staging directory"


def test_build_past_the_file_size_limit_is_one_line_and_leaves_nothing(world: World) -> None:
    _heavy_weights(world)
    before = world.snapshot()
    result = world.run("hf", "--model", "./model", "--output", "out", "--no-cache", "--copy",
                       file_size_limit=FULL_DISK)
    world.expect(result, code=1, before=before)
    assert "file-size limit" in result.stderr, result.stderr
    assert not (world.cwd / "out").exists()
    _assert_nothing_partial(world.cwd)


# ---- 9. ENOSPC (or EFBIG) while pulling ----

@pytest.fixture
def s3_world(tmp_path: Path, s3_env: S3Server) -> World:
    made = make_world(tmp_path)
    made.secrets = {k: v for k, v in s3_env.env().items() if k == "AWS_SECRET_ACCESS_KEY"}
    made.env = s3_env.env()
    return made


def _published(world: World, bucket: str) -> str:
    _heavy_weights(world)
    built = world.run("hf", "--model", "./model", "--output", "a", "--no-cache")
    assert built.returncode == 0, built.stderr
    url = f"s3://{bucket}/heavy"
    published = world.run("publish", "a", url)
    assert published.returncode == 0, published.stderr
    return url


@pytest.mark.s3
def test_pull_onto_a_full_tmpfs_is_one_line_and_leaves_nothing(s3_world: World, s3_bucket: str) -> None:
    url = _published(s3_world, s3_bucket)
    with tmpfs(s3_world.cwd / "disk", FULL_DISK) as disk:
        before = s3_world.snapshot()
        result = s3_world.run("pull", url, "disk/dest")
        s3_world.expect(result, code=1, before=before)
        assert "space" in result.error_lines[0].lower(), result.error_lines[0]
        assert list(disk.iterdir()) == [], "no partial download"


@pytest.mark.s3
def test_pull_past_the_file_size_limit_is_one_line_and_leaves_nothing(s3_world: World, s3_bucket: str) -> None:
    url = _published(s3_world, s3_bucket)
    before = s3_world.snapshot()
    result = s3_world.run("pull", url, "dest", file_size_limit=FULL_DISK)
    s3_world.expect(result, code=1, before=before)
    assert "file-size limit" in result.stderr, result.stderr
    assert not (s3_world.cwd / "dest").exists()
    _assert_nothing_partial(s3_world.cwd)
