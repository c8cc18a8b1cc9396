"""A model stored under an S3 prefix (a Hugging Face style folder), mirrored into the cache.

Downloads run in parallel (s3transfer) and resume: a file already in the mirror with the right
size and checksum is not fetched again. The checksum is the best the object offers: our own
``x-amz-meta-sha256``, a whole-object ``ChecksumSHA256``, or a single-part MD5 ETag. An object
with none of those (a multipart upload, SSE-KMS) is identified by its version (ETag, last
modified, size), recorded in a file beside the mirror directory: a changed object of the same size is fetched again
and changes the model's identity, never a stale mirror or cache entry.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from lmi_build.core.errors import SourceError
from lmi_build.core.fs import atomic_write_json
from lmi_build.core.hashing import sha256_text, tree_digest
from lmi_build.core.paths import cache_root
from lmi_build.core.types import ModelIdentity
from lmi_build.reporting.output import current
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.digest_cache import cached_sha256
from lmi_build.sources.select import has_weights, select_build_files, select_plan_files
from lmi_build.storage.client import check_bucket, endpoint_label, s3_client, s3_errors
from lmi_build.storage.paths import safe_relpath
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import SHA256_META, Download, download_all, head_many, list_sizes


def _checksum(head: dict[str, Any]) -> tuple[str, str] | None:
    """(algorithm, hex) the object can be checked against, or None when only its size can."""
    meta = (head.get("Metadata") or {}).get(SHA256_META)
    if meta:
        return "sha256", str(meta)
    full = head.get("ChecksumSHA256")
    if full and "-" not in str(full) and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT":
        return "sha256", base64.b64decode(str(full)).hex()
    etag = str(head.get("ETag", "")).strip('"')
    if len(etag) == 32 and "-" not in etag and head.get("ServerSideEncryption") != "aws:kms":
        return "md5", etag
    return None


def _versions_path(mirror: Path) -> Path:
    """Beside the mirror, not in it: the mirror holds the model's files only."""
    return mirror.with_name(f"{mirror.name}.versions.json")


def _version(head: dict[str, Any]) -> str:
    """What identifies an object that offers no checksum: ETag, last-modified and size."""
    modified: Any = head.get("LastModified")
    stamp = str(modified.isoformat()) if hasattr(modified, "isoformat") else str(modified or "")
    return f"{str(head.get('ETag', '')).strip(chr(34))}|{stamp}|{head.get('ContentLength', '')}"


def _recorded_versions(mirror: Path) -> dict[str, str]:
    try:
        data = json.loads(_versions_path(mirror).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 * 1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def _matches(path: Path, size: int, checksum: tuple[str, str] | None, same_version: bool = True) -> bool:
    if not path.is_file() or path.stat().st_size != size:
        return False
    if checksum is None:
        return same_version  # only the recorded object version can tell a same-size change
    algorithm, expected = checksum
    actual = cached_sha256([path])[path] if algorithm == "sha256" else _md5(path)
    return actual == expected


def resolve_s3(url: str, *, purpose: Literal["plan", "build"], endpoint_url: str | None = None,
               allow_pickle: bool = False, workers: int = 8) -> ResolvedSource:
    target = parse_s3_url(url, error=SourceError)
    endpoint = endpoint_label(endpoint_url)
    client = s3_client(endpoint_url, workers=workers)
    check_bucket(client, target, endpoint, error=SourceError)
    sizes = _listed_sizes(client, target, endpoint)
    build_files = select_build_files(sizes, source=str(target), allow_pickle=allow_pickle)
    if purpose == "build" and not has_weights(build_files):
        raise SourceError(f"no weights (*.safetensors) under {target}", hint="upload the model's weight files")
    checksums, versions = _object_ids(client, target, endpoint, build_files, workers)
    digest = tree_digest(
        (rel, f"{c[0]}:{c[1]}" if (c := checksums[rel]) else f"version:{versions[rel]}") for rel in build_files
    )

    mirror = cache_root() / "s3" / sha256_text(f"{endpoint}|{target}")[:24]
    mirror.mkdir(parents=True, exist_ok=True)
    wanted = build_files if purpose == "build" else select_plan_files(build_files)
    recorded = _recorded_versions(mirror)
    todo = [rel for rel in wanted
            if not _matches(mirror / rel, sizes[rel], checksums[rel], recorded.get(rel) == versions[rel])]
    with s3_errors(target, endpoint, error=SourceError, operation="downloading the model"):
        download_all(client, target.bucket, [Download(target.key(rel), mirror / rel, sizes[rel]) for rel in todo],
                     workers=workers, output=current(), label=f"download {target}")
    for rel in todo:
        if not _matches(mirror / rel, sizes[rel], checksums[rel]):
            (mirror / rel).unlink(missing_ok=True)
            raise SourceError(f"{target}/{rel} does not match its checksum after download",
                              hint="the object is corrupted or changed during the download: retry or re-upload it")
    if todo:
        atomic_write_json(_versions_path(mirror), {**recorded, **{rel: versions[rel] for rel in todo}})
    if purpose == "build":
        _remove_strays(mirror, set(build_files))
    return ResolvedSource(path=mirror, identity=ModelIdentity(kind="s3", id=str(target), digest=digest),
                          files=tuple(build_files))


def _listed_sizes(client: Any, target: S3Url, endpoint: str) -> dict[str, int]:
    """Each file under the prefix (its path below it) and its size; refused without a config.json."""
    with s3_errors(target, endpoint, error=SourceError, operation="listing the model"):
        sizes = {target.relative(key): size for key, size in
                 list_sizes(client, target.bucket, target.list_prefix).items() if not key.endswith("/")}
    for rel in sizes:
        safe_relpath(rel, error=SourceError, where=str(target))
    if "config.json" not in sizes:
        raise SourceError(f"no config.json under {target}",
                          hint="point at the prefix that holds the model's config.json and weights")
    return sizes


def _object_ids(client: Any, target: S3Url, endpoint: str, files: list[str],
                workers: int) -> tuple[dict[str, tuple[str, str] | None], dict[str, str]]:
    """Each file's checksum (None when the object offers none) and its object version."""
    with s3_errors(target, endpoint, error=SourceError, operation="reading object checksums"):
        heads = head_many(client, target.bucket, [target.key(rel) for rel in files], workers=workers,
                          extra={"ChecksumMode": "ENABLED"})
    checksums: dict[str, tuple[str, str] | None] = {}
    versions: dict[str, str] = {}
    for rel in files:
        head = heads.get(target.key(rel))
        if head is None:
            raise SourceError(f"{target}/{rel} disappeared while reading", hint="retry when the upload is complete")
        checksums[rel] = _checksum(head)
        versions[rel] = _version(head)
    return checksums, versions


def _remove_strays(mirror: Path, keep: set[str]) -> None:
    """A file the prefix no longer has must not leak into the build."""
    for stray in [p for p in mirror.rglob("*") if p.is_file() and p.relative_to(mirror).as_posix() not in keep]:
        stray.unlink()
