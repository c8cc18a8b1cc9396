"""Reading a published artifact's state: its manifest (the commit marker) and its objects."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lmi_build.artifact.files import MANIFEST_NAME, FileEntry
from lmi_build.artifact.manifest import Manifest, parse_manifest
from lmi_build.artifact.verify import SERVING_PROPERTIES, check_serving_record
from lmi_build.core.errors import LmiBuildError, OptionError, PublishError, StorageError, VerifyError
from lmi_build.core.reading import MAX_DOCUMENT_BYTES
from lmi_build.core.types import PlanMessage
from lmi_build.options.properties import collect_properties, parse_properties
from lmi_build.storage.bounded import S3Unbounded, artifact_listing_bound, read_limited, stream_chunks
from lmi_build.storage.client import check_bucket, endpoint_label, s3_client, s3_errors, translate
from lmi_build.storage.paths import safe_relpath
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import SHA256_META, head_many, list_sizes

TARBALL_NAME = "model.tar.gz"
# Metadata on the remote manifest object saying how the files were published.
LAYOUT_META = "lmi-build-layout"  # "files" (default) or "tarball"


@dataclass(frozen=True)
class RemoteManifest:
    manifest: Manifest
    data: bytes  # the exact bytes, so a pull writes the same file the publisher had
    layout: str  # "files" or "tarball"
    tarball_sha256: str | None = None


def checked_entries(manifest: Manifest, where: str, error: type[LmiBuildError]) -> list[FileEntry]:
    """The manifest's files, every path checked so none can escape a destination directory."""
    for entry in manifest.files:
        safe_relpath(entry.path, error=error, where=where)
    return list(manifest.files)


def fetch_remote_manifest(client: Any, target: S3Url, endpoint: str, *,
                          error: type[LmiBuildError] = PublishError,
                          extra: dict[str, Any] | None = None) -> RemoteManifest | None:
    """The manifest object under the prefix, or None when there is none (prefix incomplete)."""
    from botocore.exceptions import ClientError

    key = target.key(MANIFEST_NAME)
    with s3_errors(target, endpoint, error=error, operation="reading the manifest"):
        try:
            response = client.get_object(Bucket=target.bucket, Key=key, **(extra or {}))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        data = read_limited(response, f"s3://{target.bucket}/{key}", limit=MAX_DOCUMENT_BYTES)
    metadata = {k.lower(): v for k, v in (response.get("Metadata") or {}).items()}
    manifest = parse_manifest(data, f"s3://{target.bucket}/{key}")
    return RemoteManifest(
        manifest=manifest,
        data=data,
        layout=metadata.get(LAYOUT_META, "files"),
        tarball_sha256=metadata.get("tarball-sha256"),
    )


def remote_manifest(url: str, endpoint_url: str | None = None) -> Manifest | None:
    """The validated manifest of a published artifact; None when the prefix has no manifest
    (nothing was published there, or a publish did not finish)."""
    target = parse_s3_url(url, error=VerifyError)
    endpoint = endpoint_label(endpoint_url)
    client = s3_client(endpoint_url)
    check_bucket(client, target, endpoint, error=StorageError)
    found = fetch_remote_manifest(client, target, endpoint, error=StorageError)
    return found.manifest if found else None


def object_problems(expected: list[tuple[str, int, str]], heads: dict[str, dict[str, Any] | None],
                    where: S3Url) -> list[PlanMessage]:
    """Compare (key, size, sha256) expectations with HEAD responses."""
    problems: list[PlanMessage] = []
    for key, size, sha256 in expected:
        head = heads.get(key)
        url = f"s3://{where.bucket}/{key}"
        if head is None:
            problems.append(PlanMessage(code="remote_missing", message=f"{url} is missing",
                                        hint="publish the artifact again; it uploads only what is missing"))
            continue
        remote_size = int(head.get("ContentLength", -1))
        if remote_size != size:
            problems.append(PlanMessage(code="remote_size", message=f"{url} has {remote_size} bytes, manifest says {size}",
                                        hint="publish the artifact again to replace it"))
            continue
        remote_sha = (head.get("Metadata") or {}).get(SHA256_META)
        if remote_sha != sha256:
            problems.append(PlanMessage(
                code="remote_checksum",
                message=f"{url} has sha256 {str(remote_sha)[:12]}…, manifest says {sha256[:12]}…",
                hint="publish the artifact again to replace it",
            ))
    return problems


def verify_remote(url: str, endpoint_url: str | None = None, *, workers: int = 16) -> list[PlanMessage]:
    """Problems of a published artifact (empty when complete): the manifest is present and every
    object it lists is present with the manifest's size and SHA-256 (stored at upload)."""
    target = parse_s3_url(url, error=VerifyError)
    endpoint = endpoint_label(endpoint_url)
    client = s3_client(endpoint_url, workers=workers)
    check_bucket(client, target, endpoint, error=StorageError)
    found = fetch_remote_manifest(client, target, endpoint, error=StorageError)
    if found is None:
        return [PlanMessage(code="remote_manifest_missing",
                            message=f"no {MANIFEST_NAME} under {target}: the prefix is incomplete or not an artifact",
                            hint="publish it (again) with: lmi-build publish DIR " + str(target))]
    if found.layout == "tarball":
        if not found.tarball_sha256:
            return [PlanMessage(code="remote_tarball", message=f"{target} tarball publish has no recorded checksum",
                                hint="publish it again with --tarball")]
        key = target.key(TARBALL_NAME)
        with s3_errors(target, endpoint, error=StorageError, operation="head_object"):
            tar_heads = head_many(client, target.bucket, [key], workers=1)
        head = tar_heads[key]
        size = int(head["ContentLength"]) if head else -1
        tar_problems = object_problems([(key, size, found.tarball_sha256)], tar_heads, target)
        if tar_problems:
            return tar_problems
        with s3_errors(target, endpoint, error=StorageError, operation="reading the tarball"):
            return content_problems(client, target, [(key, size, found.tarball_sha256)], workers=1)
    entries = checked_entries(found.manifest, str(target), VerifyError)
    expected = [(target.key(e.path), e.size, e.sha256) for e in entries]
    with s3_errors(target, endpoint, error=StorageError, operation="head_object"):
        sizes = list_sizes(client, target.bucket, target.list_prefix, max_keys=artifact_listing_bound(len(entries)))
        # Only objects whose listed size matches need a HEAD for their checksum.
        heads: dict[str, dict[str, Any] | None] = {key: None for key, _, _ in expected if key not in sizes}
        heads.update({key: {"ContentLength": sizes[key]} for key, size, _ in expected
                      if key in sizes and sizes[key] != size})
        heads.update(head_many(client, target.bucket, [k for k, s, _ in expected if sizes.get(k) == s],
                               workers=workers))
        problems = object_problems(expected, heads, target)
        # The recorded checksum is metadata anyone who can write the object can keep: only the
        # content proves the object. Objects already reported are not downloaded again.
        problems += content_problems(client, target, [item for item in expected if _head_agrees(heads, item)],
                                     workers=workers)
        problems += _serving_record_problems(client, target, found.manifest, entries)
    return problems + unlisted_objects(sizes, expected, target)


def _serving_record_problems(client: Any, target: S3Url, manifest: Any, entries: list[FileEntry]) -> list[PlanMessage]:
    """verify's serving.properties check on the published object (a few hundred bytes)."""
    entry = next((e for e in entries if e.path == SERVING_PROPERTIES), None)
    if entry is None or entry.size > _MAX_PROPERTIES_BYTES:
        return []  # not listed (a layout check says whether it must be), or a size problem reported above
    try:
        key = target.key(SERVING_PROPERTIES)
        response = client.get_object(Bucket=target.bucket, Key=key)
        text = read_limited(response, f"s3://{target.bucket}/{key}", limit=_MAX_PROPERTIES_BYTES).decode("utf-8")
        found = collect_properties(parse_properties(text)).as_dict()
    except (OptionError, UnicodeDecodeError) as error:
        return [PlanMessage(code="serving_properties", message=f"{target.key(SERVING_PROPERTIES)}: {error}",
                            hint="publish the artifact again to replace it")]
    except client.exceptions.NoSuchKey:
        return []  # reported as a missing object above
    return check_serving_record(found, manifest)


_MAX_PROPERTIES_BYTES = 1024 * 1024
_MAX_FACT_BYTES = 64 * 1024 * 1024  # a config.json or VERSION the record checks read (as reading.py caps)


def remote_reader(url: str, manifest: Manifest, endpoint_url: str | None = None) -> Callable[[str], bytes | None]:
    """A listed file of a published artifact, as the targets' record checks read it (a few small
    files: config.json, compiled/VERSION): only a path the manifest lists, at most its listed size;
    None when it is absent, larger or unreadable (the object checks report it)."""
    target = parse_s3_url(url, error=VerifyError)
    client = s3_client(endpoint_url)
    sizes = {entry.path: entry.size for entry in manifest.files}

    def read(rel: str) -> bytes | None:
        size = sizes.get(rel)
        if size is None or size > _MAX_FACT_BYTES:
            return None
        where = f"s3://{target.bucket}/{target.key(rel)}"
        try:
            # Within the object's deadline: a body trickled a byte a second would hold verify for ever.
            data = read_limited(client.get_object(Bucket=target.bucket, Key=target.key(rel)), where, limit=size)
        except S3Unbounded as exc:  # a hostile or broken endpoint is an error, never "no such file"
            raise translate(exc, target, endpoint_label(endpoint_url), error=StorageError,
                            operation=f"reading {where}") or StorageError(str(exc)) from exc
        except Exception:
            return None
        return data if len(data) == size else None

    return read


def _head_agrees(heads: dict[str, dict[str, Any] | None], item: tuple[str, int, str]) -> bool:
    key, size, sha256 = item
    head = heads.get(key)
    return head is not None and int(head.get("ContentLength", -1)) == size \
        and (head.get("Metadata") or {}).get(SHA256_META) == sha256


def stream_sha256(client: Any, bucket: str, key: str, size: int) -> str:
    """The SHA-256 of an object's content, read as a stream (never held in memory): its
    Content-Length must be ``size`` and the read ends within the bounds of ``bounded``."""
    digest = hashlib.sha256()
    stream_chunks(client.get_object(Bucket=bucket, Key=key), size, f"s3://{bucket}/{key}", digest.update)
    return digest.hexdigest()


def content_problems(client: Any, target: S3Url, expected: list[tuple[str, int, str]], *,
                     workers: int) -> list[PlanMessage]:
    """Objects whose content does not hash to the manifest's SHA-256."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(expected) or 1))) as pool:
        actual = list(pool.map(lambda item: stream_sha256(client, target.bucket, item[0], item[1]), expected))
    return [PlanMessage(code="remote_content",
                        message=f"s3://{target.bucket}/{key} content has sha256 {found[:12]}…, manifest says "
                                f"{sha256[:12]}… (the object was changed after it was published)",
                        hint="publish the artifact again to replace it")
            for (key, _size, sha256), found in zip(expected, actual, strict=True) if found != sha256]


def unlisted_objects(sizes: dict[str, int], expected: list[tuple[str, int, str]], target: S3Url) -> list[PlanMessage]:
    """Objects under the prefix that the manifest does not list (a stale file of an earlier
    artifact, something copied in by hand): a reader downloading the prefix would get them too."""
    listed = {key for key, _, _ in expected} | {target.key(MANIFEST_NAME)}
    extra = sorted(key for key in sizes if key not in listed)
    if not extra:
        return []
    more = f" (+{len(extra) - 1} more)" if len(extra) > 1 else ""
    return [PlanMessage(code="remote_unlisted",
                        message=f"{extra[0]} is under {target} but not in its {MANIFEST_NAME}{more}",
                        hint="publish again with --overwrite to remove objects the manifest does not list")]
