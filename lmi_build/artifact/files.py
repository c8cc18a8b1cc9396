"""The file list of an artifact: what the manifest records and what verify/publish/pull check."""

import errno
import os
import stat
from pathlib import Path
from typing import Literal

from pydantic import field_validator

from lmi_build.core.hashing import sha256_files
from lmi_build.core.types import FrozenModel

MANIFEST_NAME = "lmi-build.json"


def escaping_path(rel: str) -> str | None:
    """Why ``rel`` (a path from a manifest, a listing, a cache entry) is not a plain relative POSIX
    path that stays inside the directory it is read under; None when it is one."""
    if not rel:
        return "it is empty"
    if "\\" in rel or "\0" in rel or (len(rel) > 1 and rel[1] == ":"):
        return "it is not a POSIX path"
    if rel.startswith("/"):
        return "it is absolute"
    if any(part in ("..", ".", "") for part in rel.split("/")):  # split, not PurePosixPath: it drops "."
        return "it escapes the artifact or is not a normalized path"
    return None


class FileEntry(FrozenModel):
    path: str  # relative, POSIX separators, never absolute, never ".."
    size: int
    sha256: str  # hex

    @field_validator("path")
    @classmethod
    def _stays_inside(cls, path: str) -> str:
        # Wherever the entry comes from (a manifest, a remote listing, a cache entry): a path that
        # leaves the directory it is read under is never a file of it.
        problem = escaping_path(path)
        if problem is not None:
            raise ValueError(f"file path {path!r} is refused: {problem}")
        return path


def walk_files(root: Path) -> list[Path]:
    """Every regular file under root except the manifest itself, sorted, symlinks refused."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in dirnames:  # os.walk lists a linked directory here and does not enter it
            if (Path(dirpath) / name).is_symlink():
                raise ValueError(f"symbolic link in artifact: {(Path(dirpath) / name).relative_to(root)}")
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


class EntryProblem(FrozenModel):
    """One manifest entry that the files on disk do not match."""

    entry: FileEntry
    kind: Literal["missing", "size", "sha256"]
    found_size: int | None = None
    found_sha256: str | None = None


# lstat errors that mean "no such regular file here", as pathlib's is_file() treats them.
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def verify_entries(root: Path, entries: list[FileEntry], *, rehash: bool = True,
                   workers: int = 8) -> list[EntryProblem]:
    """Check files under ``root`` against manifest entries: present as regular files (no links),
    the recorded size, and (with ``rehash``) the recorded SHA-256, hashed in parallel. The one
    check behind verify, publish (before uploading) and pull (resume, and after downloading).
    ``entry.path`` must already be validated as relative and inside the artifact."""
    problems: list[EntryProblem] = []
    to_hash: dict[Path, FileEntry] = {}
    base = os.fspath(root)
    real_dirs: dict[str, bool] = {"": True}
    for entry in entries:
        # One lstat a file, not pathlib's is_symlink + is_file + stat: a manifest may list 100k files.
        try:
            found = os.lstat(os.path.join(base, entry.path))
        except OSError as error:
            if error.errno not in _ABSENT:
                raise
            found = None
        # A file reached through a linked directory is outside the artifact, whatever its bytes.
        inside = found is not None and _real_directory(base, entry.path.rpartition("/")[0], real_dirs)
        if found is None or not inside or not stat.S_ISREG(found.st_mode):  # absent, a link, a directory, a FIFO
            problems.append(EntryProblem(entry=entry, kind="missing"))
            continue
        size = found.st_size
        if size != entry.size:
            problems.append(EntryProblem(entry=entry, kind="size", found_size=size))
        elif rehash:
            to_hash[root / entry.path] = entry
    for path, digest in sha256_files(list(to_hash), workers=workers).items():
        if digest != to_hash[path].sha256:
            problems.append(EntryProblem(entry=to_hash[path], kind="sha256", found_sha256=digest))
    return problems


def _real_directory(base: str, rel: str, known: dict[str, bool]) -> bool:
    """Whether every component of the directory ``rel`` under ``base`` is a directory, none a link
    (each directory is looked at once however many files it holds)."""
    missing: list[str] = []
    while rel not in known:
        missing.append(rel)
        rel = rel.rpartition("/")[0]
    real = known[rel]
    for directory in reversed(missing):  # from the top down
        if real:
            try:
                real = stat.S_ISDIR(os.lstat(os.path.join(base, directory)).st_mode)
            except OSError:
                real = False
        known[directory] = real
    return real


def inside_artifact(root: Path, rel: str) -> bool:
    """Whether ``rel`` is a plain relative path whose directories under ``root`` are all real
    directories (a file reached through a linked directory is outside the artifact)."""
    return escaping_path(rel) is None and _real_directory(os.fspath(root), rel.rpartition("/")[0], {"": True})
