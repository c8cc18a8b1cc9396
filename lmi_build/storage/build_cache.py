"""The shared build cache in S3: finished artifacts kept under their plan's cache key, for every host.

Layout under the cache URL (``s3://bucket/prefix``)::

    <digest>/entry.json            the commit: {"attempt": "<id>", "cache_key": ...}
    <digest>/<attempt id>/...      one builder's artifact, published with ``storage.publish``
                                   (objects first, verified, ``lmi-build.json`` last)

Why attempts and a pointer: S3 cannot rename a prefix, and two hosts that build the same key at
once must not write into the same objects (builds are not byte-reproducible: manifests carry
times and hosts). Each builder publishes into its own attempt prefix, then commits by creating
``entry.json`` with a conditional PUT (``If-None-Match: *``): the first commit wins, the loser
removes its own never-committed attempt and reuses the winner's. A reader only ever follows
``entry.json`` to an attempt whose manifest was written last, and verifies it (every object's size
and stored SHA-256) before using it. Publishing a cached entry copies objects server-side.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.manifest import load_manifest
from lmi_build.core.errors import LmiBuildError, PublishError
from lmi_build.core.reading import MAX_DOCUMENT_BYTES, parse_json
from lmi_build.reporting.output import Output, current
from lmi_build.storage.bounded import read_limited
from lmi_build.storage.client import check_bucket, endpoint_label, s3_client, s3_errors
from lmi_build.storage.publish import check_prefix_owned, publish, refuse_replacing
from lmi_build.storage.remote import (
    RemoteManifest,
    checked_entries,
    fetch_remote_manifest,
    object_problems,
    verify_remote,
)
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import SHA256_META, delete_keys, head_many, list_sizes

ENTRY_NAME = "entry.json"
# copy_object copies up to 5 GiB in one request; larger objects go through s3transfer's multipart copy.
SINGLE_COPY_LIMIT = 5 * 1024**3


@dataclass(frozen=True)
class CacheEntry:
    cache_key: str
    url: str  # s3://.../<digest>/<attempt>: a complete, verified artifact
    total_bytes: int | None = None  # its manifest's, when the lookup read it


# An attempt is the uuid4 hex ``store`` wrote; anything else in entry.json ("..", "a/b") was not.
ATTEMPT_ID = re.compile(r"[0-9a-f]{32}")


def cache_digest(cache_key: str) -> str:
    """The hex digest of a plan's ``sha256:<hex>`` cache key (refused when malformed)."""
    algorithm, _, digest = cache_key.partition(":")
    if algorithm != "sha256" or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise PublishError(f"malformed cache key {cache_key!r}", hint="this is a bug in the planner")
    return digest


def _is_precondition_failure(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(exc, ClientError) and \
        str(exc.response.get("Error", {}).get("Code")) in ("PreconditionFailed", "412", "ConditionalRequestConflict")


class RemoteBuildCache:
    """``--cache s3://bucket/prefix``: look up, store and publish artifacts by cache key."""

    def __init__(self, url: str, *, endpoint_url: str | None = None, output: Output | None = None) -> None:
        self.root: S3Url = parse_s3_url(url)
        self.endpoint_url = endpoint_url
        self.endpoint = endpoint_label(endpoint_url)
        self.output = output or current()
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client(self.endpoint_url)
        return self._client

    def check(self) -> None:
        """A wrong bucket, endpoint or missing credentials fail before any build starts."""
        check_bucket(self.client, self.root, self.endpoint)

    def _entry_root(self, cache_key: str) -> S3Url:
        return S3Url(self.root.bucket, self.root.key(cache_digest(cache_key)))

    def lookup(self, cache_key: str) -> CacheEntry | None:
        """The committed entry for ``cache_key``, verified object by object; None on a miss.
        An entry that does not verify is reported and treated as a miss (the next store replaces it)."""
        entry_root = self._entry_root(cache_key)
        pointer = self._read_pointer(entry_root)
        if pointer is None:
            return None
        attempt = str(pointer.get("attempt", ""))
        url = f"s3://{entry_root.bucket}/{entry_root.key(attempt)}"
        if not ATTEMPT_ID.fullmatch(attempt) or pointer.get("cache_key") != cache_key:
            self.output.warn(f"ignoring the cache entry {entry_root}: its {ENTRY_NAME} is not for this key")
            return None
        try:
            problems = verify_remote(url, self.endpoint_url)
            found = fetch_remote_manifest(self.client, parse_s3_url(url), self.endpoint)
        except LmiBuildError as error:  # a manifest that cannot be read or names ../ paths: a bad entry
            self.output.warn(f"ignoring a corrupted cache entry ({error.message}); building afresh")
            return None
        if problems or found is None or found.manifest.cache_key != cache_key:
            reason = problems[0].message if problems else "its manifest has another cache key"
            self.output.warn(f"ignoring a corrupted cache entry ({reason}); building afresh")
            return None
        return CacheEntry(cache_key=cache_key, url=url, total_bytes=found.manifest.total_bytes)

    def store(self, cache_key: str, artifact_dir: Path) -> CacheEntry:
        """Publish ``artifact_dir`` as this key's entry, or reuse the entry another host committed
        first. The artifact's own manifest must carry ``cache_key``."""
        manifest = load_manifest(artifact_dir)
        if manifest.cache_key != cache_key:
            raise PublishError(f"{artifact_dir} is not the artifact of {cache_key[:19]}…",
                               hint="this is a bug: store the artifact the plan produced")
        entry_root = self._entry_root(cache_key)
        attempt = uuid.uuid4().hex
        url = f"s3://{entry_root.bucket}/{entry_root.key(attempt)}"
        publish(artifact_dir, url, endpoint_url=self.endpoint_url, output=self.output)
        pointer = json.dumps({"attempt": attempt, "cache_key": cache_key}).encode()
        ours = CacheEntry(cache_key=cache_key, url=url, total_bytes=manifest.total_bytes)
        if self._commit(entry_root, pointer):
            return ours
        # Another host committed first: ours was never visible to anyone, so it can go.
        self._delete_prefix(parse_s3_url(url))
        winner = self.lookup(cache_key)
        if winner is None:  # the winner's entry does not verify: replace the pointer with ours
            publish(artifact_dir, url, endpoint_url=self.endpoint_url, output=self.output)
            self._commit(entry_root, pointer, replace=True)
            return ours
        return winner

    def copy_to(self, entry: CacheEntry, publish_url: str, *, overwrite: bool = False) -> int:
        """Publish a cached entry to ``publish_url`` by server-side copies (nothing is re-uploaded),
        with the same commit order as ``publish``: objects, check, manifest last. Returns the
        number of objects copied (objects already there with the same SHA-256 are kept)."""
        source = parse_s3_url(entry.url)
        target = parse_s3_url(publish_url)
        check_bucket(self.client, target, self.endpoint)
        with s3_errors(target, self.endpoint, operation="publish (server-side copy)"):
            found = fetch_remote_manifest(self.client, source, self.endpoint)
            if found is None:
                raise PublishError(f"the cache entry {source} has no manifest", hint="rerun; it is rebuilt")
            wanted = [(e.path, e.size, e.sha256) for e in checked_entries(found.manifest, str(source), PublishError)]
            todo, replaced, manifest_kept = self._copies_needed(target, found, wanted, overwrite)
            for path, size in todo:
                self._copy_object(source, target, path, size)
            after = head_many(self.client, target.bucket, [target.key(p) for p, _, _ in wanted], workers=8)
            problems = object_problems([(target.key(p), size, sha) for p, size, sha in wanted], after, target)
            if problems:
                raise PublishError(f"after the copy, {problems[0].message}", hint="rerun the same command")
            if not manifest_kept:
                self._copy_object(source, target, MANIFEST_NAME, len(found.data))
            # The replaced artifact's own objects, and nothing else (check_prefix_owned).
            delete_keys(self.client, target.bucket, replaced - {target.key(p) for p, _, _ in wanted})
        return len(todo)

    def _copies_needed(self, target: S3Url, found: RemoteManifest, wanted: list[tuple[str, int, str]],
                       overwrite: bool) -> tuple[list[tuple[str, int]], set[str], bool]:
        """The entry's files (path, size) ``target`` lacks, after refusing what this publish does not
        own and un-committing a manifest the copy changes; the keys of the artifact replaced; and
        whether ``target``'s manifest stays (it is this entry's and no object changes)."""
        existing = fetch_remote_manifest(self.client, target, self.endpoint)
        same = existing is not None and existing.manifest.content_digest == found.manifest.content_digest
        replaced = check_prefix_owned(self.client, target, ours={target.key(p) for p, _, _ in wanted},
                                      existing=existing, same_artifact=same, overwrite=overwrite)
        heads = head_many(self.client, target.bucket, [target.key(p) for p, _, _ in wanted], workers=8)
        todo = [(p, size) for p, size, sha in wanted
                if (heads.get(target.key(p)) or {}).get("Metadata", {}).get(SHA256_META) != sha]
        refuse_replacing(target, [target.key(p) for p, _ in todo],
                         present={key for key, head in heads.items() if head is not None},
                         same_artifacts=replaced if same else set(), overwrite=overwrite)
        if existing is not None and (todo or existing.data != found.data):
            # Un-commit first: a reader must never see an old manifest over changed objects.
            self.client.delete_object(Bucket=target.bucket, Key=target.key(MANIFEST_NAME))
            return todo, replaced, False
        return todo, replaced, existing is not None

    # ---- S3 primitives ----

    def _read_pointer(self, entry_root: S3Url) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        with s3_errors(entry_root, self.endpoint, operation="reading the build cache"):
            try:
                key = entry_root.key(ENTRY_NAME)
                response = self.client.get_object(Bucket=entry_root.bucket, Key=key)
                body = read_limited(response, f"s3://{entry_root.bucket}/{key}", limit=MAX_DOCUMENT_BYTES)
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise
        try:
            data = parse_json(body, what="build cache pointer")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _commit(self, entry_root: S3Url, pointer: bytes, *, replace: bool = False) -> bool:
        """Create ``entry.json``; False when another builder created it first."""
        condition = {} if replace else {"IfNoneMatch": "*"}
        with s3_errors(entry_root, self.endpoint, operation="committing the cache entry"):
            try:
                self.client.put_object(Bucket=entry_root.bucket, Key=entry_root.key(ENTRY_NAME), Body=pointer,
                                       ContentType="application/json", **condition)
            except Exception as exc:
                if _is_precondition_failure(exc):
                    return False
                raise
        return True

    def _copy_object(self, source: S3Url, target: S3Url, path: str, size: int) -> None:
        copy_source = {"Bucket": source.bucket, "Key": source.key(path)}
        if size <= SINGLE_COPY_LIMIT:
            self.client.copy_object(Bucket=target.bucket, Key=target.key(path), CopySource=copy_source,
                                    MetadataDirective="COPY")
            return
        head = self.client.head_object(**copy_source)  # multipart copies take the metadata explicitly
        self.client.copy(copy_source, target.bucket, target.key(path),
                         ExtraArgs={"Metadata": head.get("Metadata") or {}})

    def _delete_prefix(self, prefix: S3Url) -> None:
        with s3_errors(prefix, self.endpoint, operation="removing an uncommitted cache attempt"):
            delete_keys(self.client, prefix.bucket, list_sizes(self.client, prefix.bucket, prefix.list_prefix))
