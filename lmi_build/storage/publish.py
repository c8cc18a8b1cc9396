"""``publish``: upload an artifact to ``s3://bucket/prefix`` so that a reader sees all of it or
none of it.

Order of work, and why:
1. The local files are checked against the manifest first: a corrupted artifact is refused
   before anything is sent.
2. Objects already present with the same size and SHA-256 (``x-amz-meta-sha256``) are skipped,
   so a rerun after a crash uploads only the rest and an unchanged artifact uploads nothing.
3. If the prefix holds a different manifest, it is deleted before any object changes: readers
   then see "incomplete" instead of an old manifest over new files.
4. Objects go up in parallel with S3 additional checksums (SHA-256: whole-object for single
   PUTs, checked by the server against the manifest hash; per part for multipart uploads).
5. Every object is checked remotely (size + stored SHA-256), then the manifest goes up LAST: it
   is the commit marker.
6. Only then, and only if asked, is the local artifact deleted.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmi_build.artifact.files import MANIFEST_NAME, FileEntry, verify_entries
from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.artifact.verify import built_by_stand_in
from lmi_build.core.errors import PublishError
from lmi_build.core.fs import PlantedPath
from lmi_build.core.hashing import sha256_file
from lmi_build.reporting.output import Output, current
from lmi_build.storage.client import check_bucket, endpoint_label, s3_client, s3_errors
from lmi_build.storage.paths import inside
from lmi_build.storage.remote import (
    LAYOUT_META,
    TARBALL_NAME,
    RemoteManifest,
    checked_entries,
    fetch_remote_manifest,
    object_problems,
    remote_manifest,
    verify_remote,
)
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import (
    SHA256_META,
    TransferSummary,
    Upload,
    b64_sha256,
    delete_keys,
    head_many,
    list_sizes,
    upload_all,
)

__all__ = ["TransferSummary", "publish", "remote_manifest", "verify_remote"]


def verify_local_files(root: Path, entries: list[FileEntry], *, workers: int = 8) -> None:
    """Raise PublishError naming the first file that is missing or differs from the manifest."""
    for entry in entries:
        inside(root, entry.path)  # a manifest path must never lead outside the artifact
    for problem in verify_entries(root, entries, workers=workers):
        entry = problem.entry
        why, state = {"missing": (f"is listed in {MANIFEST_NAME} but missing from {root}", "incomplete"),
                      "size": (f"has {problem.found_size} bytes, {MANIFEST_NAME} says {entry.size}", "corrupted"),
                      "sha256": (f"does not match its sha256 in {MANIFEST_NAME}", "corrupted")}[problem.kind]
        raise PublishError(f"{entry.path} {why}", hint=f"the artifact is {state}: rebuild it")


def write_tarball(artifact_dir: Path, entries: list[FileEntry], destination: Path) -> None:
    """A reproducible ``model.tar.gz`` (sorted, zero mtimes, no owners) for SageMaker's
    compressed model data; the manifest is included. Level 1: weights barely compress."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o644 if info.isfile() else 0o755
        return info

    names = sorted([e.path for e in entries] + [MANIFEST_NAME])
    with open(destination, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            tar.add(str(artifact_dir / name), arcname=name, recursive=False, filter=normalise)


def _refuse_links(artifact_dir: Path) -> None:
    """An artifact is plain files: a symbolic link (the directory itself or inside it) would upload
    whatever it points at, or make --delete-local remove the wrong tree."""
    if artifact_dir.is_symlink():
        raise PublishError(f"{artifact_dir} is a symbolic link", hint="publish the directory it points to")
    for path in artifact_dir.rglob("*"):
        if path.is_symlink():
            raise PublishError(f"{path.relative_to(artifact_dir)} in {artifact_dir} is a symbolic link",
                               hint="an artifact holds regular files only: rebuild it, or replace the link with the file")


def _remove_replaced(client: Any, target: S3Url, old: set[str], keep: set[str], owner_args: dict[str, str],
                     output: Output) -> None:
    """After the new manifest committed: delete the replaced artifact's objects (those its manifest
    listed) that the new one does not list. Nothing else under the prefix is ever deleted."""
    stale = old - keep - {target.key(MANIFEST_NAME)}
    delete_keys(client, target.bucket, stale, extra=owner_args)
    if stale:
        output.info(f"removed {len(stale)} objects of the replaced artifact")


def check_prefix_owned(client: Any, target: S3Url, *, ours: set[str], existing: RemoteManifest | None,
                       same_artifact: bool, overwrite: bool, owner_args: dict[str, str] | None = None) -> set[str]:
    """Refuse a publish prefix that holds what this publish does not own: another artifact below
    it (its own manifest deeper down), objects that belong to no artifact there (a hand upload), or
    a different artifact without ``overwrite``. ``ours``: the keys this publish writes. Returns the
    keys of the artifact being replaced (``existing``'s files), the only ones publish may delete."""
    manifest_key = target.key(MANIFEST_NAME)
    keys = set(list_sizes(client, target.bucket, target.list_prefix, extra=owner_args or {}))
    nested = sorted(key for key in keys if key != manifest_key and key.rsplit("/", 1)[-1] == MANIFEST_NAME)
    if nested:
        inner = nested[0].rsplit("/", 1)[0]
        raise PublishError(f"{target} holds another artifact below it (s3://{target.bucket}/{inner}/)",
                           hint="publish to a prefix of its own; a publish never replaces or mixes with another artifact")
    if existing is not None and not same_artifact and not overwrite:
        raise PublishError(f"{target} holds a different artifact",
                           hint="pass --overwrite to replace it, or publish to another prefix")
    old: set[str] = set()
    if existing is not None:
        old = {target.key(TARBALL_NAME)} if existing.layout == "tarball" else \
            {target.key(entry.path) for entry in existing.manifest.files}
    foreign = sorted(keys - ours - old - {manifest_key})
    if foreign:
        more = f" (+{len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise PublishError(f"{target} holds objects that belong to no lmi-build artifact there: "
                           f"s3://{target.bucket}/{foreign[0]}{more}",
                           hint="publish to an empty prefix, or remove those objects yourself first")
    return old


def refuse_replacing(target: S3Url, todo: list[str], *, present: set[str], same_artifacts: set[str],
                     overwrite: bool) -> None:
    """Without ``overwrite``, a publish replaces no object that is there with other content (a hand
    upload, a different artifact's unfinished publish): ``todo`` are the keys it would write,
    ``present`` those under the prefix now, ``same_artifacts`` the objects of the very artifact
    being published again (a repair of its own objects is no replacement)."""
    if overwrite:
        return
    replaced = sorted(key for key in todo if key in present and key not in same_artifacts)
    if replaced:
        more = f" (+{len(replaced) - 1} more)" if len(replaced) > 1 else ""
        raise PublishError(f"{target} already holds s3://{target.bucket}/{replaced[0]}{more}, with other content "
                           "than this artifact's", hint="pass --overwrite to replace it, or publish to an empty prefix")


def _plan_uploads(client: Any, target: S3Url, uploads: list[Upload], *, workers: int,
                  owner_args: dict[str, str]) -> tuple[list[Upload], int, set[str]]:
    """Which uploads are still needed (missing, other size, other SHA-256), how many are skipped,
    and the keys under the prefix now."""
    sizes = list_sizes(client, target.bucket, target.list_prefix, extra=owner_args)
    same_size = [u.key for u in uploads if sizes.get(u.key) == u.size]
    heads = head_many(client, target.bucket, same_size, workers=workers, extra=owner_args)
    todo = [u for u in uploads if ((heads.get(u.key) or {}).get("Metadata") or {}).get(SHA256_META) != u.sha256]
    return todo, len(uploads) - len(todo), set(sizes)


# One ListMultipartUploads page holds at most 1000 uploads; a prefix with more pages than this is
# not a killed publish's leftovers (its keys are at most the artifact's files).
MAX_UPLOAD_PAGES = 100


def abort_leftover_uploads(client: Any, target: S3Url, keys: set[str], owner_args: dict[str, str]) -> int:
    """Abort the unfinished multipart uploads of ``keys`` (this artifact's objects under the prefix),
    found before this publish uploads anything: what a killed publish left (its parts are stored,
    and billed, until aborted; s3transfer aborts only the uploads it sees fail). Uploads of any other
    key are never touched. Returns how many were aborted."""
    aborted = 0
    request: dict[str, Any] = {"Bucket": target.bucket, "Prefix": target.list_prefix, **owner_args}
    for _ in range(MAX_UPLOAD_PAGES):
        page = client.list_multipart_uploads(**request)
        for upload in page.get("Uploads") or []:
            if upload.get("Key") in keys and upload.get("UploadId"):
                client.abort_multipart_upload(Bucket=target.bucket, Key=upload["Key"], UploadId=upload["UploadId"],
                                              **owner_args)
                aborted += 1
        if not page.get("IsTruncated"):
            break
        request.update(KeyMarker=page.get("NextKeyMarker", ""), UploadIdMarker=page.get("NextUploadIdMarker", ""))
    return aborted


@dataclass(frozen=True)
class _Prefix:
    """Where a publish writes, and what every request there carries."""

    client: Any
    target: S3Url
    endpoint: str
    owner_args: dict[str, str]
    encryption: dict[str, str]
    workers: int


def publish(
    artifact_dir: Path,
    url: str,
    *,
    endpoint_url: str | None = None,
    delete_local: bool = False,
    expected_bucket_owner: str | None = None,
    sse_kms_key_id: str | None = None,
    tarball: bool = False,
    workers: int = 8,
    output: Output | None = None,
    overwrite: bool = False,
) -> TransferSummary:
    """Upload the artifact at ``artifact_dir`` to ``url``; the manifest goes last (commit marker).

    A prefix holding a different artifact is refused unless ``overwrite``; then the new manifest
    commits first and the old artifact's objects that the new one does not list are removed."""
    output = output or current()
    started = time.monotonic()
    target = parse_s3_url(url)
    manifest, entries = _local_artifact(artifact_dir)
    manifest_bytes = (artifact_dir / MANIFEST_NAME).read_bytes()
    encryption = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": sse_kms_key_id} if sse_kms_key_id else {}
    prefix = _Prefix(s3_client(endpoint_url, workers=workers), target, endpoint_label(endpoint_url),
                     {"ExpectedBucketOwner": expected_bucket_owner} if expected_bucket_owner else {}, encryption,
                     workers)
    # Remote problems (no bucket, no credentials) show before gigabytes are hashed.
    check_bucket(prefix.client, target, prefix.endpoint, expected_owner=expected_bucket_owner)
    output.info(f"checking {len(entries)} files against {MANIFEST_NAME}")
    verify_local_files(artifact_dir, entries, workers=workers)

    manifest_meta = {SHA256_META: hashlib.sha256(manifest_bytes).hexdigest(),
                     LAYOUT_META: "tarball" if tarball else "files"}
    tar_path = artifact_dir.parent / f".{artifact_dir.name}.{TARBALL_NAME}.partial" if tarball else None
    try:
        if tar_path is not None:
            uploads = [_tarball_upload(prefix, artifact_dir, entries, tar_path, output)]
            manifest_meta["tarball-sha256"] = uploads[0].sha256
        else:
            uploads = [Upload(artifact_dir / e.path, target.key(e.path), e.size, e.sha256,
                              {**prefix.owner_args, **encryption}) for e in entries]
        with s3_errors(target, prefix.endpoint, operation="publish"):
            todo, skipped, manifest_current, replaced = _upload_missing(
                prefix, uploads, manifest_bytes, manifest_meta, manifest.content_digest, overwrite, output)
            _commit(prefix, uploads, manifest_bytes, manifest_meta, write_manifest=not manifest_current)
            if overwrite:
                _remove_replaced(prefix.client, target, replaced, {u.key for u in uploads}, prefix.owner_args, output)
    finally:
        if tar_path is not None and tar_path.exists():
            tar_path.unlink()

    if delete_local:
        shutil.rmtree(artifact_dir)
        output.info(f"deleted {artifact_dir} (every object verified under {target})")
    uploaded = todo + ([] if manifest_current else [Upload(artifact_dir / MANIFEST_NAME, "", len(manifest_bytes), "")])
    return TransferSummary(bytes=sum(u.size for u in uploaded), objects=len(uploaded),
                           skipped=skipped + (1 if manifest_current else 0),
                           seconds=round(time.monotonic() - started, 3))


def _local_artifact(artifact_dir: Path) -> tuple[Manifest, list[FileEntry]]:
    """The artifact's manifest and its checked file entries; refused when it is no directory, holds a
    link, or a stand-in compiler built it."""
    if not artifact_dir.is_dir():
        if artifact_dir.exists():  # a file (README.md): not "does not exist" (issue 30 item 6)
            raise PublishError(f"{artifact_dir} is not a directory",
                               hint=f"give the artifact directory (it holds {MANIFEST_NAME})")
        raise PublishError(f"artifact directory {artifact_dir} does not exist", hint="build it first, or check the path")
    _refuse_links(artifact_dir)
    manifest = load_manifest(artifact_dir)
    if built_by_stand_in(manifest):
        # A stand-in's output is structurally valid and servable by nothing: it never leaves this host.
        raise PublishError(f"{artifact_dir} was built by a STAND-IN compiler, not the real {manifest.target} toolchain",
                           hint="build it with the real toolchain before publishing")
    return manifest, checked_entries(manifest, str(artifact_dir / MANIFEST_NAME), PublishError)


def _tarball_upload(prefix: _Prefix, artifact_dir: Path, entries: list[FileEntry], tar_path: Path,
                    output: Output) -> Upload:
    """``model.tar.gz`` of the artifact, written next to it at ``tar_path``, as the one upload."""
    if tar_path.is_symlink() or (tar_path.exists() and not tar_path.is_file()):
        raise PlantedPath(tar_path, "a symbolic link or not a regular file")
    tar_path.unlink(missing_ok=True)  # a killed publish's leftover: ours, and rewritten whole
    output.info(f"writing {TARBALL_NAME}")
    write_tarball(artifact_dir, entries, tar_path)
    return Upload(tar_path, prefix.target.key(TARBALL_NAME), tar_path.stat().st_size, sha256_file(tar_path),
                  {**prefix.owner_args, **prefix.encryption})


def _upload_missing(prefix: _Prefix, uploads: list[Upload], manifest_bytes: bytes, manifest_meta: dict[str, str],
                    digest: str, overwrite: bool, output: Output) -> tuple[list[Upload], int, bool, set[str]]:
    """Upload what the prefix lacks, after refusing what this publish does not own and un-committing
    a manifest the upload changes. Returns the uploads made, how many were skipped, whether the
    manifest there is already this one, and the keys of the artifact replaced."""
    client, target, owner_args = prefix.client, prefix.target, prefix.owner_args
    existing = fetch_remote_manifest(client, target, prefix.endpoint, extra=owner_args)
    same = existing is not None and existing.manifest.content_digest == digest
    replaced = check_prefix_owned(client, target, ours={u.key for u in uploads}, existing=existing,
                                  same_artifact=same, overwrite=overwrite, owner_args=owner_args)
    todo, skipped, present = _plan_uploads(client, target, uploads, workers=prefix.workers, owner_args=owner_args)
    if abort_leftover_uploads(client, target, {u.key for u in uploads}, owner_args):
        output.info("aborted the unfinished uploads a killed publish left under the prefix")
    refuse_replacing(target, [u.key for u in todo], present=present,
                     same_artifacts=replaced if same else set(), overwrite=overwrite)
    manifest_current = existing is not None and existing.data == manifest_bytes and \
        existing.layout == manifest_meta[LAYOUT_META]
    if existing is not None and (todo or not manifest_current):
        # Un-commit first: a reader must never see an old manifest over changed objects.
        client.delete_object(Bucket=target.bucket, Key=target.key(MANIFEST_NAME), **owner_args)
        manifest_current = False
    if skipped or manifest_current:
        # Counted as the summary counts them, the manifest included ("7 of 7 ... skipped", then
        # "skipped 8" read as a miscount).
        in_place = skipped + (1 if manifest_current else 0)
        output.info(f"{in_place} of {len(uploads) + 1} objects already in place (manifest included), skipped")
    upload_all(client, target.bucket, todo, workers=prefix.workers, output=output, label=f"publish {target}")
    return todo, skipped, manifest_current, replaced


def _commit(prefix: _Prefix, uploads: list[Upload], manifest_bytes: bytes, manifest_meta: dict[str, str], *,
            write_manifest: bool) -> None:
    """Check every object remotely, then put the manifest (the commit marker) and read it back."""
    client, target, owner_args = prefix.client, prefix.target, prefix.owner_args
    heads = head_many(client, target.bucket, [u.key for u in uploads], workers=prefix.workers, extra=owner_args)
    problems = object_problems([(u.key, u.size, u.sha256) for u in uploads], heads, target)
    if problems:
        raise PublishError(f"after upload, {problems[0].message}" +
                           (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                           hint="rerun the same command; it uploads only what is missing")
    if write_manifest:
        client.put_object(Bucket=target.bucket, Key=target.key(MANIFEST_NAME), Body=manifest_bytes,
                          ContentType="application/json", Metadata=manifest_meta,
                          ChecksumSHA256=b64_sha256(manifest_meta[SHA256_META]), **owner_args, **prefix.encryption)
    committed = fetch_remote_manifest(client, target, prefix.endpoint, extra=owner_args)
    if committed is None or committed.data != manifest_bytes:
        raise PublishError(f"the manifest under {target} does not read back as written", hint="rerun the same command")
