"""Parallel uploads (s3transfer, boto3's transfer manager) and downloads (ranged GETs, see
``download_all``), with progress.

All files of a publish/pull share the same ``workers`` threads, small files and the parts of big
ones alike. On any failure (or Ctrl-C) what is in flight is cancelled; a download is written to a
temporary name and renamed only when complete (and verified), so an interrupted file never looks
finished.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.client
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from lmi_build.core.errors import PublishError
from lmi_build.core.fs import open_private
from lmi_build.reporting import events
from lmi_build.reporting.output import Output
from lmi_build.storage.bounded import (
    MAX_LISTED_KEYS,
    RATE_RANGE,
    Deadline,
    check_length,
    list_pages,
    object_seconds,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Parts of 32 MiB: big enough that per-request overhead is small, small enough that a 2 GB
# shard is split over all workers. Objects at or below the threshold go up in one PUT, which lets
# the server check the whole-object SHA-256 we send against the manifest.
PART_SIZE = 32 * 1024 * 1024
BANDWIDTH_ENV = "LMI_BUILD_S3_MAX_BANDWIDTH"
# Downloads: receive up to 1 MiB per call straight into the file's memory map (a stop request or
# the progress bar is seen at least that often), hash 1 MiB per call from the same map (hashlib
# releases the GIL for each), and GET a part up to 5 times on network errors, as s3transfer does.
READ_CHUNK = 1024 * 1024
HASH_CHUNK = 1024 * 1024
DOWNLOAD_ATTEMPTS = 5
SHA256_META = "sha256"  # stored as x-amz-meta-sha256: the whole-object hash, whatever the part size
# DeleteObjects takes at most 1000 keys a request: S3 (and SeaweedFS) refuse a longer list whole.
DELETE_BATCH = 1000


class TransferSummary(BaseModel):
    bytes: int  # bytes actually transferred (skipped objects not counted)
    objects: int  # objects transferred
    skipped: int  # objects already in place with the right size and checksum
    seconds: float


@dataclass(frozen=True)
class Upload:
    path: Path
    key: str
    size: int
    sha256: str  # hex
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Download:
    key: str
    path: Path
    size: int
    sha256: str | None = None  # hex; when given, checked while downloading, before the file gets its name


def b64_sha256(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def max_bandwidth() -> int | None:
    """``LMI_BUILD_S3_MAX_BANDWIDTH`` (bytes/s): cap transfers on a shared link (None = no cap)."""
    value = os.environ.get(BANDWIDTH_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not RATE_RANGE[0] <= int(value) <= RATE_RANGE[1]:
        raise PublishError(f"{BANDWIDTH_ENV}={value[:40]!r} is not a whole number of bytes per second from "
                           f"{RATE_RANGE[0]:g} to {RATE_RANGE[1]:g}", hint=f"set it like {BANDWIDTH_ENV}=50000000, or unset it")
    return int(value)


def transfer_config(workers: int) -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=PART_SIZE,
        multipart_chunksize=PART_SIZE,
        max_concurrency=max(1, workers),
        use_threads=True,
        io_chunksize=1024 * 1024,  # 4x the default: ~9% faster downloads here, <=100 MiB buffered
        max_bandwidth=max_bandwidth(),
        # boto3 switches to the CRT client by itself on the instance types it deems optimized (p4d, p5,
        # trn1...: where users build) when awscrt is installed. That client ignores this config (part size,
        # bandwidth cap, the per-part SHA-256) and prints its own tracebacks to stderr, so it is never used.
        preferred_transfer_client="classic",
    )


def _subscriber(progress: Progress | None, task: TaskID | None, counted: events.ByteEvents) -> list[Any]:
    if (progress is None or task is None) and not events.listened():
        return []
    from s3transfer.subscribers import BaseSubscriber

    class _Advance(BaseSubscriber):
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            # Negative on a retried part: rich's advance() moves back, which is what we want.
            if progress is not None and task is not None:
                progress.advance(task, bytes_transferred)
            counted.add(bytes_transferred)

    return [_Advance()]


@contextmanager
def _progress_task(output: Output, label: str,
                   total: int) -> Iterator[tuple[Progress | None, TaskID | None, events.ByteEvents]]:
    """The transfer's bar (human mode) and its ``bytes`` events (``--events``, a matrix's live view)."""
    with output.progress() as progress:
        task = progress.add_task(label, total=total) if progress is not None else None
        counted = events.ByteEvents(label, total)
        try:
            yield progress, task, counted
        except BaseException:
            counted.finish(complete=False)
            raise
        counted.finish()


def upload_all(client: Any, bucket: str, uploads: Sequence[Upload], *, workers: int, output: Output,
               label: str = "upload") -> None:
    """Upload every item; the first failure cancels the rest and is raised."""
    if not uploads:
        return
    from boto3.s3.transfer import create_transfer_manager

    total = sum(u.size for u in uploads)
    with _progress_task(output, label, total) as (progress, task, counted):
        subscribers = _subscriber(progress, task, counted)
        with create_transfer_manager(client, transfer_config(workers)) as manager:
            futures = []
            for item in uploads:
                extra = {"Metadata": {SHA256_META: item.sha256}, **item.extra}
                if item.size <= PART_SIZE:
                    extra["ChecksumSHA256"] = b64_sha256(item.sha256)  # server verifies the manifest hash
                else:
                    extra["ChecksumAlgorithm"] = "SHA256"  # server verifies each part
                futures.append(
                    manager.upload(str(item.path), bucket, item.key, extra_args=extra, subscribers=subscribers)
                )
            for future in futures:
                future.result()


class ChecksumMismatch(Exception):
    """A downloaded object's SHA-256 is not the expected one (the file was deleted, nothing moved)."""

    def __init__(self, item: Download, actual: str) -> None:
        super().__init__(f"{item.key}: sha256 {actual}, expected {item.sha256}")
        self.item = item
        self.actual = actual


class _Throttle:
    """``LMI_BUILD_S3_MAX_BANDWIDTH`` for downloads: all threads together stay under the cap."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.consumed = 0

    def delay(self, count: int) -> float:
        """Account ``count`` bytes; returns the seconds to sleep to stay under the cap."""
        with self.lock:
            self.consumed += count
            return max(0.0, self.consumed / self.rate - (time.monotonic() - self.start))


class _Progress:
    """Advances the rich bar in steps of at least 1 MiB: per 32 KiB chunk it would cost more than the copy."""

    STEP = 1024 * 1024

    def __init__(self, progress: Progress | None, task: TaskID | None, counted: events.ByteEvents) -> None:
        self.progress, self.task, self.counted = progress, task, counted

    def advance(self, count: int) -> None:
        if self.progress is not None and self.task is not None and count:
            self.progress.advance(self.task, count)
        if count:
            self.counted.add(count)


class _FileSink:
    """One object being downloaded, received straight into a memory map of a temporary sibling of
    the destination: each part lands at its offset with one copy (socket to page cache), and the
    SHA-256 follows the contiguous prefix received so far, hashed from that same map by whichever
    worker finished the part that extended it. So every byte is hashed while the download runs, as
    it is in the file, with no second pass, no read-back and no part held in memory. The file is
    moved to its name only once complete and, when ``sha256`` is given, verified."""

    def __init__(self, item: Download) -> None:
        self.item = item
        self.temp = item.path.parent / f".{item.path.name}.lmi-build-download"
        self.fd = -1  # opened by the first part to start: a model of thousands of files must not open them all
        self.map: mmap.mmap | None = None
        self.view = memoryview(b"")  # the whole map; parts receive into slices of it
        self.digest = hashlib.sha256()
        self.lock = threading.Lock()
        self.hashed = 0  # bytes [0, hashed) are in the digest
        self.ready: dict[int, int] = {}  # received parts not yet hashed: start -> end
        self.hashing = False  # one worker at a time extends the digest
        self.closed = False

    def open(self) -> memoryview:
        with self.lock:
            if self.fd < 0 and not self.closed:
                self.item.path.parent.mkdir(parents=True, exist_ok=True)
                # Never through a planted link: the temporary name sits next to user data.
                self.fd = open_private(self.temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                if self.item.size:
                    # Reserve the blocks first: a full disk is then an OSError here, not a SIGBUS
                    # when a page of the map is written.
                    _reserve(self.fd, self.item.size)
                    self.map = mmap.mmap(self.fd, self.item.size)
                    self.view = memoryview(self.map)
            return self.view

    def part_written(self, start: int, end: int) -> bool:
        """Record [start, end) as received; hash what became contiguous. True when this call
        finished the file (hashed, verified and moved into place)."""
        with self.lock:
            self.ready[start] = end
            if self.hashing:
                return False  # the worker that is hashing will pick this part up
            self.hashing = True
        while True:
            with self.lock:
                begin, stop = self.hashed, self.hashed
                while stop in self.ready:
                    stop = self.ready.pop(stop)
                if stop == begin:
                    self.hashing = False
                    if begin < self.item.size or self.closed:
                        return False
                    self.closed = True
                    break
            for offset in range(begin, stop, HASH_CHUNK):  # hashlib releases the GIL on each chunk
                self.digest.update(self.view[offset:min(stop, offset + HASH_CHUNK)])
            with self.lock:
                self.hashed = stop
        self._finish()
        return True

    def _unmap(self) -> None:
        self.view.release()
        if self.map is not None:
            # A slice still referenced (by a traceback) keeps the map: it is unmapped when freed.
            with contextlib.suppress(BufferError):
                self.map.close()
            self.map = None

    def _finish(self) -> None:
        self._unmap()
        os.close(self.fd)
        actual = self.digest.hexdigest()
        if self.item.sha256 is not None and actual != self.item.sha256:
            self.temp.unlink(missing_ok=True)
            raise ChecksumMismatch(self.item, actual)
        os.replace(self.temp, self.item.path)

    def abandon(self) -> None:
        with self.lock:
            if self.closed or self.fd < 0:
                self.closed = True
                return
            self.closed = True
        self._unmap()
        os.close(self.fd)
        self.temp.unlink(missing_ok=True)


def _reserve(fd: int, size: int) -> None:
    """Give the file its final size with its blocks allocated where the platform can."""
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is None:  # macOS: no fallocate; the map needs the size at least
        os.ftruncate(fd, size)
        return
    allocate(fd, 0, size)


@functools.cache
def _retryable() -> tuple[type[BaseException], ...]:
    """Errors while reading a body that are worth another GET of the part: s3transfer's own list,
    plus http.client/urllib3 failures that reading below urllib3 can raise."""
    from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS
    from urllib3.exceptions import HTTPError  # botocore's transport, loaded with it (~30 modules)

    return (*S3_RETRYABLE_DOWNLOAD_ERRORS, http.client.HTTPException, HTTPError)


def _body_reader(body: Any) -> tuple[Callable[[memoryview], int], Callable[[], None]]:
    """(readinto, release) for a GetObject body.

    Why not simply ``body.readinto``: urllib3's readinto is read() plus a copy, i.e. a new bytes
    object and ~10 µs of Python per 32 KiB chunk; on the storage benchmark that cost 0.9 CPU-s per
    2 GiB, a third of the whole transfer. With botocore's usual objects (StreamingBody over urllib3
    over http.client) we read through http.client's readinto, which receives straight into our buffer,
    and hand the connection back to urllib3's pool at the end. Any other shape uses the public API.
    botocore never asks urllib3 to decode content, so both paths see the same bytes."""
    raw = getattr(body, "_raw_stream", None)
    inner = getattr(raw, "_fp", None)
    release_conn = getattr(raw, "release_conn", None)
    if isinstance(inner, http.client.HTTPResponse) and callable(release_conn):
        def release() -> None:
            if inner.isclosed():  # read to the end: the connection is clean and can be reused
                release_conn()
            else:
                body.close()

        return inner.readinto, release
    return body.readinto, body.close


def _fetch_part(client: Any, bucket: str, sink: _FileSink, start: int, end: int, extra: dict[str, Any],
                stop: threading.Event, progress: _Progress, throttle: _Throttle | None) -> None:
    """GET [start, end) of the object into the sink's file. A network error while reading is retried
    (up to DOWNLOAD_ATTEMPTS GETs, as s3transfer) from the first byte not yet written; a write
    error (disk full) is not. The part is hashed only once complete, so what the digest covers is
    exactly what the file holds."""
    view = sink.open()
    retryable = _retryable()
    offset = start
    where = f"s3://{bucket}/{sink.item.key}"
    # One total bound for the part, its retries included: a server that trickles the body passes
    # every per-read timeout, and must not hold the download forever.
    deadline = Deadline(object_seconds(end - start), where)
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        request: dict[str, Any] = {"Bucket": bucket, "Key": sink.item.key, **extra}
        if end - offset != sink.item.size:
            request["Range"] = f"bytes={offset}-{end - 1}"
        response = client.get_object(**request)
        try:
            # What the response claims is checked before a byte is read (a lying Content-Length).
            check_length(response, end - offset, where + (f" bytes {offset}-{end - 1}" if "Range" in request else ""))
        except BaseException:
            response["Body"].close()
            raise
        readinto, release = _body_reader(response["Body"])
        pending = 0
        try:
            while offset < end:
                if stop.is_set():
                    return
                try:
                    with deadline.watching(response["Body"]):  # a read cut short at the deadline
                        count = readinto(view[offset:min(end, offset + READ_CHUNK)])
                except retryable as error:
                    deadline.check(offset - start, end - start)  # cut short: no retry past the bound
                    if attempt == DOWNLOAD_ATTEMPTS:
                        raise
                    events.emit("retry", what=where, attempt=attempt + 1, of=DOWNLOAD_ATTEMPTS,
                                reason=type(error).__name__)
                    break
                deadline.check(offset + count - start, end - start)
                if not count:
                    if attempt == DOWNLOAD_ATTEMPTS:
                        from botocore.exceptions import IncompleteReadError

                        raise IncompleteReadError(actual_bytes=offset - start, expected_bytes=end - start)
                    break
                offset += count
                pending += count
                if pending >= _Progress.STEP:
                    progress.advance(pending)
                    pending = 0
                if throttle is not None and (wait := throttle.delay(count)):
                    deadline.extend(wait)  # our own cap's waiting is not the server's slowness
                    stop.wait(wait)  # not sleep(): Ctrl-C waited for every thread's whole delay (6-9 s)
        finally:
            release()
            progress.advance(pending)
        if offset == end:
            sink.part_written(start, end)
            return


def download_all(client: Any, bucket: str, downloads: Sequence[Download], *, workers: int, output: Output,
                 extra: dict[str, Any] | None = None, label: str = "download") -> None:
    """Download every item in ranged GETs of ``PART_SIZE`` over ``workers`` threads, each file
    written to a temporary name and moved into place only when complete (and, with ``sha256``,
    verified: a mismatch raises ChecksumMismatch). The first failure (or Ctrl-C) stops the rest and
    removes the unfinished files.

    Why not s3transfer, which uploads use: on the storage benchmark its downloads cost 3x s5cmd's CPU
    (a new bytes object per chunk, handed through a queue to one writer thread), and it cannot hash
    while downloading. Why a memory map instead of write() from a buffer: the bytes are copied once
    (socket to page cache) instead of three times (socket to buffer, buffer to page cache, page
    cache back to a buffer to hash); on the storage benchmark (1 GiB, 8 workers) that took the
    client from 2.4-3.0 CPU-s to 1.9-2.2, of which SHA-256 itself is 0.72."""
    if not downloads:
        return
    rate = max_bandwidth()
    throttle = _Throttle(rate) if rate else None
    extra = dict(extra or {})
    total = sum(d.size for d in downloads)
    sinks: list[_FileSink] = []
    stop = threading.Event()
    with _progress_task(output, label, total) as (progress, task, counted):
        bar = _Progress(progress, task, counted)
        try:
            jobs: list[tuple[_FileSink, int, int]] = []
            for item in downloads:
                sink = _FileSink(item)
                sinks.append(sink)
                # Parts in file order, files one after the other: the digest of each file can follow
                # right behind its download while the page cache still holds what was written.
                jobs += [(sink, start, min(start + PART_SIZE, item.size))
                         for start in range(0, item.size, PART_SIZE)] or [(sink, 0, 0)]
            with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
                futures = [pool.submit(_fetch_part, client, bucket, sink, start, end, extra, stop, bar, throttle)
                           for sink, start, end in jobs]
                try:
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    for future in done:
                        future.result()
                finally:
                    stop.set()
                    for future in futures:
                        future.cancel()
        finally:
            for sink in sinks:
                sink.abandon()


def head_many(client: Any, bucket: str, keys: Sequence[str], *, workers: int,
              extra: dict[str, Any] | None = None) -> dict[str, dict[str, Any] | None]:
    """HEAD many keys in parallel: key -> response, or None when the object does not exist."""
    from botocore.exceptions import ClientError

    def head(key: str) -> dict[str, Any] | None:
        try:
            response: dict[str, Any] = client.head_object(Bucket=bucket, Key=key, **(extra or {}))
            return response
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    if not keys:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        return dict(zip(keys, pool.map(head, keys), strict=True))


def list_sizes(client: Any, bucket: str, prefix: str, *, extra: dict[str, Any] | None = None,
               max_keys: int = MAX_LISTED_KEYS) -> dict[str, int]:
    """Every key under ``prefix`` with its size (paginated, within the listing bounds of ``bounded``)."""
    return {key: size for page in list_pages(client, bucket, prefix, extra=extra, max_keys=max_keys)
            for key, size in page}


def delete_keys(client: Any, bucket: str, keys: Iterable[str], *, extra: dict[str, Any] | None = None) -> None:
    """Delete ``keys`` with DeleteObjects, ``DELETE_BATCH`` keys a request. A key the server did not
    delete is an error: DeleteObjects answers 200 and lists such keys (AccessDenied, ...) in ``Errors``."""
    ordered = sorted(keys)
    for start in range(0, len(ordered), DELETE_BATCH):
        batch = [{"Key": key} for key in ordered[start:start + DELETE_BATCH]]
        response = client.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True}, **(extra or {}))
        failed = response.get("Errors") or []
        if failed:
            first = failed[0]
            more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
            raise PublishError(f"S3 did not delete s3://{bucket}/{first.get('Key')}: "
                               f"{first.get('Code')} {first.get('Message') or ''}".rstrip() + more,
                               hint="check that the credentials may delete objects there (s3:DeleteObject), "
                                    "then remove what is left yourself")
