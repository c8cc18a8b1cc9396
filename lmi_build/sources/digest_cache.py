"""File hashes cached by the file's identity, so the second run over a multi-GB model directory reads
nothing but ``stat``. The identity is (absolute path, device, inode, size, mtime, ctime): size and
mtime alone can be kept by a replaced file (``cp --preserve``, ``touch -r``, an unpacked archive),
while ctime is set by the kernel on every change and cannot be set back by a user.

One small JSON file per directory under ``<lmi-build cache>/file-digests/``, named by the digest of
the directory's path: a lookup reads only the records of the directory it hashes. (One file for
every directory ever hashed was read, pruned with a ``stat`` per record and rewritten by every plan:
a host that plans many model directories, a CI runner or the test suite, paid for all of them each
time.) At most MAX_DIRECTORIES files are kept, the least recently written removed first. The cache
is advisory: a lost, foreign or corrupt file only costs a re-hash."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from lmi_build.core.fs import atomic_write_json
from lmi_build.core.hashing import sha256_files
from lmi_build.core.paths import cache_root
from lmi_build.core.reading import read_json_file

CACHE_DIR = "file-digests"
MAX_DIRECTORIES = 1024


def cache_file_for(directory: Path) -> Path:
    """Where the records of the files directly inside ``directory`` (an absolute, resolved path) are kept."""
    # The path's bytes: a name that is not UTF-8 (read under LC_ALL=C as surrogates) has a digest too.
    return cache_root() / CACHE_DIR / f"{hashlib.sha256(os.fsencode(directory)).hexdigest()[:32]}.json"


def _load(path: Path, directory: Path) -> dict[str, Any]:
    try:
        data = read_json_file(path, what="digest cache")
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("directory") != str(directory) or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def _save(path: Path, directory: Path, records: dict[str, Any]) -> None:
    new = not path.exists()
    with contextlib.suppress(OSError):  # advisory cache: failing to write it is not an error
        atomic_write_json(path, {"directory": str(directory), "files": records}, indent=None, sort_keys=True)
        if new:
            _bound(path.parent)


def _bound(folder: Path) -> None:
    """Remove the least recently written cache files beyond MAX_DIRECTORIES."""
    files = [entry for entry in os.scandir(folder) if entry.name.endswith(".json") and entry.is_file()]
    if len(files) <= MAX_DIRECTORIES:
        return
    files.sort(key=lambda entry: entry.stat().st_mtime_ns)
    for entry in files[:len(files) - MAX_DIRECTORIES]:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def cached_sha256(paths: list[Path], *, workers: int | None = None) -> dict[Path, str]:
    """SHA-256 of each path (symlinks followed), reusing cached values whose file identity matches."""
    by_directory: dict[Path, list[tuple[Path, Path, os.stat_result]]] = defaultdict(list)
    for path in paths:
        real = path.resolve()
        by_directory[real.parent].append((path, real, path.stat()))
    result: dict[Path, str] = {}
    stale: dict[Path, os.stat_result] = {}
    records_of: dict[Path, dict[str, Any]] = {}
    for directory, members in by_directory.items():
        records = records_of[directory] = _load(cache_file_for(directory), directory)
        for path, real, stat in members:
            record = records.get(real.name)
            if isinstance(record, dict) and record.get("identity") == _identity(stat):
                result[path] = str(record["sha256"])
            else:
                stale[path] = stat
    if not stale:
        return result
    hashes = sha256_files(list(stale), workers=workers)
    changed: set[Path] = set()
    for path, stat in stale.items():
        real = path.resolve()
        result[path] = hashes[path]
        records_of[real.parent][real.name] = {"identity": _identity(stat), "sha256": hashes[path]}
        changed.add(real.parent)
    for directory in changed:
        # Forget files that no longer exist, so a directory's records do not grow without bound.
        records = {name: record for name, record in records_of[directory].items() if (directory / name).exists()}
        _save(cache_file_for(directory), directory, records)
    return result
