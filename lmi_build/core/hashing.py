"""Content hashing shared by sources, artifacts, manifests and publishing."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# 8 MiB reads: large enough that hashlib (which releases the GIL) dominates, small enough to
# keep memory flat when several files are hashed in parallel.
CHUNK = 8 * 1024 * 1024
SMALL_CHUNK = 64 * 1024


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        # No larger than the file: a zeroed 8 MiB buffer costs more than hashing a small config file.
        buffer = bytearray(min(CHUNK, max(SMALL_CHUNK, os.fstat(handle.fileno()).st_size)))
        view = memoryview(buffer)
        while True:
            read = handle.readinto(buffer)
            if not read:
                break
            digest.update(view[:read])
    return digest.hexdigest()


# Below this many bytes in all, files are hashed in this thread: starting a pool costs more than it
# saves (a plan hashes a model's config and tokenizer files, a few MB).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024


def sha256_files(paths: Iterable[Path], workers: int | None = None) -> dict[Path, str]:
    """Hash many files in parallel threads (hashlib releases the GIL on large updates)."""
    items = list(paths)
    if len(items) < 2 or sum(os.stat(path).st_size for path in items) < PARALLEL_MIN_BYTES:
        return {path: sha256_file(path) for path in items}
    workers = workers or min(8, (os.cpu_count() or 2) * 2)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(zip(items, pool.map(sha256_file, items), strict=True))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_digest(entries: Iterable[tuple[str, str]]) -> str:
    """A digest over (relative path, file sha256) pairs: stable across hosts and path roots."""
    digest = hashlib.sha256()
    for rel, file_hash in sorted(entries):
        digest.update(f"{rel}\0{file_hash}\n".encode())
    return "sha256:" + digest.hexdigest()
