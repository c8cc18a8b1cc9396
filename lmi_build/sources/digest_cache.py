"""File hashes cached by the file's identity, so the second run over a multi-GB model directory reads
nothing but ``stat``. The identity is (absolute path, device, inode, size, mtime, ctime): size and
mtime alone can be kept by a replaced file (``cp --preserve``, ``touch -r``, an unpacked archive),
while ctime is set by the kernel on every change and cannot be set back by a user. The cache is a
small JSON file under the lmi-build cache dir; it is advisory (a lost or corrupt cache only costs a
re-hash)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from lmi_build.fs import atomic_write_json
from lmi_build.hashing import sha256_files
from lmi_build.paths import cache_root
from lmi_build.reading import read_json_file

CACHE_NAME = "file-digests.json"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = read_json_file(path, what="digest cache")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: Path, data: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # advisory cache: failing to write it is not an error
        atomic_write_json(path, data, indent=None, sort_keys=True)


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def cached_sha256(paths: list[Path], *, workers: int | None = None) -> dict[Path, str]:
    """SHA-256 of each path (symlinks followed), reusing cached values whose file identity matches."""
    cache_path = cache_root() / CACHE_NAME
    cache = _load(cache_path)
    result: dict[Path, str] = {}
    stale: dict[Path, tuple[str, os.stat_result]] = {}
    for path in paths:
        real = str(path.resolve())
        stat = path.stat()
        record = cache.get(real)
        if isinstance(record, dict) and record.get("identity") == _identity(stat):
            result[path] = str(record["sha256"])
        else:
            stale[path] = (real, stat)
    if stale:
        hashes = sha256_files(list(stale), workers=workers)
        for path, (real, stat) in stale.items():
            result[path] = hashes[path]
            cache[real] = {"identity": _identity(stat), "sha256": hashes[path]}
        # Forget files that no longer exist, so the cache does not grow without bound.
        cache = {key: value for key, value in cache.items() if os.path.exists(key)}
        _save(cache_path, cache)
    return result
