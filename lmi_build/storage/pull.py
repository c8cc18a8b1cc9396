"""``pull``: download a published artifact, verified file by file, into place atomically.

Files land in a fixed temporary sibling of the destination (``.<name>.lmi-build-partial``), so an
interrupted pull resumes there: files already present with the manifest's size and SHA-256 are
kept (unless the disk filled up: then the partial directory is removed). Only when every file
verifies is the manifest written and the directory renamed into place. The destination is locked
as a build's output is (``fs.directory_lock``): a second pull (or a build) into it fails at once.
A prefix without a manifest is refused: its publish never finished.
"""

from __future__ import annotations

import errno
import os
import shutil
import tarfile
import time
import zlib
from pathlib import Path

from lmi_build.artifact.files import MANIFEST_NAME, FileEntry, verify_entries
from lmi_build.artifact.output_place import check_output_place, protected_places
from lmi_build.core.errors import PublishError
from lmi_build.core.fs import DirectoryBusy, directory_lock, private_dir
from lmi_build.core.paths import cache_root
from lmi_build.reporting.output import Output, current
from lmi_build.storage.bounded import artifact_listing_bound
from lmi_build.storage.client import check_bucket, endpoint_label, s3_client, s3_errors
from lmi_build.storage.paths import safe_relpath
from lmi_build.storage.remote import TARBALL_NAME, RemoteManifest, checked_entries, fetch_remote_manifest
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import ChecksumMismatch, Download, TransferSummary, download_all, list_sizes

# errno values of a write the disk (or a quota, or the file-size limit) cannot hold.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _verified(root: Path, entries: list[FileEntry], *, workers: int) -> set[str]:
    """Paths of entries already present under root with the right size and SHA-256."""
    wrong = {problem.entry.path for problem in verify_entries(root, entries, workers=workers)}
    return {entry.path for entry in entries if entry.path not in wrong}


def _remove_strays(root: Path, keep: set[str]) -> None:
    """Delete files of an earlier, different attempt (and unfinished downloads) from the partial dir."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if path.relative_to(root).as_posix() not in keep:
                path.unlink()


def _existing_destination(dest: Path, found: RemoteManifest, entries: list[FileEntry], workers: int) -> bool:
    """True when dest already holds exactly this artifact; raise when it holds anything else."""
    if not dest.exists():
        return False
    if not dest.is_dir():
        raise PublishError(f"destination {dest} exists and is not a directory", hint="choose another path")
    if not any(dest.iterdir()):
        return False
    local_manifest = dest / MANIFEST_NAME
    if local_manifest.is_file() and local_manifest.read_bytes() == found.data and \
            _verified(dest, entries, workers=workers) == {e.path for e in entries}:
        return True
    raise PublishError(f"destination {dest} already exists and does not hold this artifact",
                       hint="remove it or choose another directory (nothing was overwritten)")


def _check_destination(dest: Path) -> None:
    """A destination that is a link (it would write elsewhere), the current directory, below a
    file or unwritable is refused before anything is downloaded."""
    if dest.is_symlink():
        raise PublishError(f"destination {dest} is a symbolic link", hint="pull into a real directory path")
    check_output_place(dest, overwrite=False, protected=protected_places(model_dir=None, cache=cache_root()))


def _extract_tarball(archive: Path, into: Path, sizes: dict[str, int]) -> None:
    """Extract after checking every member: relative, inside, a regular file or directory, and
    (files) listed in the manifest with its size, so a hostile archive cannot fill the disk."""
    try:
        _extract_checked(archive, into, sizes)
    except (tarfile.TarError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError: see below
        raise PublishError(f"{TARBALL_NAME} is not a readable gzip tar archive ({error})",
                           hint="the remote artifact is corrupted: publish it again") from None
    except OSError as error:
        if error.errno is not None:  # a real I/O fault of this machine (disk full, ...): the CLI's line
            raise
        raise PublishError(f"{TARBALL_NAME} is not a readable gzip tar archive ({error})",
                           hint="the remote artifact is corrupted: publish it again") from None


def _extract_checked(archive: Path, into: Path, sizes: dict[str, int]) -> None:
    with tarfile.open(archive, mode="r:gz") as tar:
        for member in tar.getmembers():
            name = safe_relpath(member.name.rstrip("/"), error=PublishError, where=TARBALL_NAME)
            if not (member.isfile() or member.isdir()):
                raise PublishError(f"{TARBALL_NAME} holds {member.name!r}, which is not a regular file",
                                   hint="republish it with lmi-build publish --tarball")
            if member.isfile() and sizes.get(str(name)) != member.size:
                raise PublishError(f"{TARBALL_NAME} holds {member.name!r} ({member.size} bytes), which its manifest "
                                   "does not list with that size", hint="the remote artifact is corrupted: publish it again")
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: the stdlib's own safety filter too
            tar.extractall(into, filter="data")
        else:  # every member was checked above: relative, inside, regular file or directory
            tar.extractall(into)


def _download_files(client: object, target: S3Url, found: RemoteManifest, entries: list[FileEntry],
                    partial: Path, *, workers: int, output: Output, endpoint: str) -> tuple[int, int]:
    keep = {e.path for e in entries}
    _remove_strays(partial, keep)
    present = _verified(partial, entries, workers=workers)
    todo = [e for e in entries if e.path not in present]
    if todo:
        sizes = list_sizes(client, target.bucket, target.list_prefix, max_keys=artifact_listing_bound(len(entries)))
        for entry in todo:
            key = target.key(entry.path)
            if key not in sizes:
                raise PublishError(f"s3://{target.bucket}/{key} is listed in the manifest but missing",
                                   hint="the remote artifact is damaged: publish it again")
            if sizes[key] != entry.size:
                raise PublishError(f"s3://{target.bucket}/{key} has {sizes[key]} bytes, the manifest says {entry.size}",
                                   hint="the remote artifact is corrupted: publish it again")
    if present:
        output.info(f"{len(present)} of {len(entries)} files already downloaded, kept")
    # Each file is hashed while it downloads and gets its name only when it matches the manifest.
    downloads = [Download(target.key(e.path), partial / e.path, e.size, e.sha256) for e in todo]
    try:
        download_all(client, target.bucket, downloads, workers=workers, output=output, label=f"pull {target}")
    except ChecksumMismatch as bad:
        raise PublishError(
            f"s3://{target.bucket}/{bad.item.key} does not match the manifest "
            f"(sha256 {bad.actual[:12]}…, expected {str(bad.item.sha256)[:12]}…)",
            hint="the remote artifact is corrupted: publish it again",
        ) from None
    return sum(e.size for e in todo), len(present)


def _download_tarball(client: object, target: S3Url, found: RemoteManifest, entries: list[FileEntry],
                      partial: Path, *, workers: int, output: Output) -> tuple[int, int]:
    shutil.rmtree(partial)
    partial.mkdir(parents=True)
    archive = partial.parent / f"{partial.name}.{TARBALL_NAME}"
    sizes = list_sizes(client, target.bucket, target.list_prefix, max_keys=artifact_listing_bound(len(entries)))
    key = target.key(TARBALL_NAME)
    if key not in sizes:
        raise PublishError(f"s3://{target.bucket}/{key} is missing", hint="publish it again with --tarball")
    if not found.tarball_sha256:
        raise PublishError(f"s3://{target.bucket}/{key} has no recorded sha256",
                           hint="publish it again with --tarball")
    try:
        try:
            download_all(client, target.bucket, [Download(key, archive, sizes[key], found.tarball_sha256)],
                         workers=workers, output=output, label=f"pull {target}")
        except ChecksumMismatch:
            raise PublishError(f"s3://{target.bucket}/{key} does not match its recorded sha256",
                               hint="the remote artifact is corrupted: publish it again") from None
        _extract_tarball(archive, partial, {**{e.path: e.size for e in entries},
                                            MANIFEST_NAME: len(found.data)})
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # a failed tarball pull leaves nothing behind
        raise
    finally:
        archive.unlink(missing_ok=True)
    (partial / MANIFEST_NAME).unlink(missing_ok=True)  # rewritten below from the remote bytes
    bad = {e.path for e in entries} - _verified(partial, entries, workers=workers)
    if bad:
        raise PublishError(f"{TARBALL_NAME} does not match the manifest ({sorted(bad)[0]})",
                           hint="the remote artifact is corrupted: publish it again")
    _remove_strays(partial, {e.path for e in entries})
    return sizes[key], 0


def pull(url: str, dest: Path, *, endpoint_url: str | None = None, workers: int = 8,
         output: Output | None = None) -> TransferSummary:
    """Download the artifact at ``url`` into ``dest`` (which must not exist, be empty, or already
    hold this very artifact)."""
    output = output or current()
    started = time.monotonic()
    target = parse_s3_url(url)
    endpoint = endpoint_label(endpoint_url)
    client = s3_client(endpoint_url, workers=workers)
    check_bucket(client, target, endpoint)
    found = fetch_remote_manifest(client, target, endpoint)
    if found is None:
        raise PublishError(f"no {MANIFEST_NAME} under {target}: the prefix is incomplete or not an lmi-build artifact",
                           hint="publish it (again) with lmi-build publish; a finished publish writes it last")
    entries = checked_entries(found.manifest, str(target), PublishError)
    _check_destination(dest)
    dest = dest.absolute()
    # One writer of dest and its partial directory at a time (two pulls, or a pull and a build):
    # sharing the partial files, one truncated what the other had mapped (SIGBUS) or renamed.
    try:
        with directory_lock(dest):
            return _pull_locked(client, target, found, entries, dest, endpoint=endpoint, workers=workers,
                                output=output, started=started)
    except DirectoryBusy as busy:
        raise PublishError(f"another lmi-build is writing {dest} ({busy.holder})",
                           hint="wait for it to finish, or pull into another directory") from None


def _pull_locked(client: object, target: S3Url, found: RemoteManifest, entries: list[FileEntry], dest: Path, *,
                 endpoint: str, workers: int, output: Output, started: float) -> TransferSummary:
    """``pull`` once it holds the destination's lock: nothing else writes dest or its partial directory."""
    if _existing_destination(dest, found, entries, workers):
        output.info(f"{dest} already holds this artifact, verified")
        return TransferSummary(bytes=0, objects=0, skipped=len(entries) + 1,
                               seconds=round(time.monotonic() - started, 3))

    partial = private_dir(dest.parent / f".{dest.name}.lmi-build-partial")
    try:
        with s3_errors(target, endpoint, operation="pull"):
            if found.layout == "tarball":
                transferred, kept = _download_tarball(client, target, found, entries, partial, workers=workers,
                                                      output=output)
                objects = 1
            else:
                transferred, kept = _download_files(client, target, found, entries, partial, workers=workers,
                                                    output=output, endpoint=endpoint)
                objects = len(entries) - kept
        (partial / MANIFEST_NAME).write_bytes(found.data)
    except OSError as error:
        # An interrupted pull keeps its files to resume; one that filled the disk does not: resuming
        # cannot succeed, and the partial files hold the space the user now has to free.
        if error.errno in DISK_FULL:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    if dest.exists():
        dest.rmdir()  # empty (checked above)
    os.rename(partial, dest)
    return TransferSummary(bytes=transferred + len(found.data), objects=objects + 1, skipped=kept,
                           seconds=round(time.monotonic() - started, 3))
