"""The file list of an artifact: what the manifest records and what verify/publish/pull check."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from lmi_build.hashing import sha256_files

MANIFEST_NAME = "lmi-build.json"


class FileEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str  # relative, POSIX separators, never absolute, never ".."
    size: int
    sha256: str  # hex


def walk_files(root: Path) -> list[Path]:
    """Every regular file under root except the manifest itself, sorted, symlinks refused."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                raise ValueError(f"symbolic link in artifact: {path.relative_to(root)}")
            if path.parent == root and name == MANIFEST_NAME:
                continue
            found.append(path)
    return found


def list_files(root: Path) -> list[FileEntry]:
    """Size and SHA-256 of every file under root (hashed in parallel)."""
    paths = walk_files(root)
    hashes = sha256_files(paths)
    return [
        FileEntry(path=p.relative_to(root).as_posix(), size=p.stat().st_size, sha256=hashes[p])
        for p in paths
    ]
