"""File hashes cached by (absolute path, size, mtime), so the second run over a multi-GB model
directory reads nothing but ``stat``. The cache is a small JSON file under the lmi-build cache
dir; it is advisory (a lost or corrupt cache only costs a re-hash)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from lmi_build.fs import atomic_write_json
from lmi_build.hashing import sha256_files
from lmi_build.paths import cache_root

CACHE_NAME = "file-digests.json"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: Path, data: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # advisory cache: failing to write it is not an error
        atomic_write_json(path, data, indent=None, sort_keys=True)


def cached_sha256(paths: list[Path], *, workers: int | None = None) -> dict[Path, str]:
    """SHA-256 of each path (symlinks followed), reusing cached values whose size and mtime match."""
    cache_path = cache_root() / CACHE_NAME
    cache = _load(cache_path)
    result: dict[Path, str] = {}
    stale: dict[Path, tuple[str, os.stat_result]] = {}
    for path in paths:
        real = str(path.resolve())
        stat = path.stat()
        record = cache.get(real)
        if isinstance(record, dict) and record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns:
            result[path] = str(record["sha256"])
        else:
            stale[path] = (real, stat)
    if stale:
        hashes = sha256_files(list(stale), workers=workers)
        for path, (real, stat) in stale.items():
            result[path] = hashes[path]
            cache[real] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": hashes[path]}
        # Forget files that no longer exist, so the cache does not grow without bound.
        cache = {key: value for key, value in cache.items() if os.path.exists(key)}
        _save(cache_path, cache)
    return result
