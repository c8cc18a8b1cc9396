"""Total bounds on what an S3 endpoint (or a proxy in front of it) may make lmi-build wait for or hold.

botocore's ``read_timeout`` bounds one socket read: a body trickled a byte at a time, or a listing
that never stops saying "truncated", passes every read and never ends. So:

- every object body is read with a total deadline (``object_seconds``: the read timeout plus the
  size at a minimum rate, ``LMI_BUILD_S3_MIN_RATE``) checked after each chunk;
- a response's Content-Length is checked against the size lmi-build expects (the manifest's, the
  listing's) or a cap before any byte is read: a claimed petabyte is refused, never allocated;
- a listing has a total deadline (``LMI_BUILD_S3_LIST_TIMEOUT``), a key cap, and fails at once
  when the server repeats a continuation token or a key;
- every request, from its start to its response headers (and to the end of the small bodies
  botocore reads and parses itself), has a total deadline too: ``watched``.

The exceptions here are not one-line errors themselves: ``client.translate`` turns them into the
calling command's error class, naming the endpoint (never its credentials).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lmi_build.core.errors import PublishError
from lmi_build.core.reading import MAX_DOCUMENT_BYTES

MIN_RATE_ENV = "LMI_BUILD_S3_MIN_RATE"
LIST_TIMEOUT_ENV = "LMI_BUILD_S3_LIST_TIMEOUT"
# 128 KiB/s per request: a 32 MiB part may take 60 s + 256 s at worst. A link that slow would
# take days for a model; a body slower than this is a broken or hostile server.
DEFAULT_MIN_RATE = 128 * 1024
# A whole listing (1,000 keys a page: a million keys is ~1,000 requests) within 10 minutes.
DEFAULT_LIST_SECONDS = 600.0
# No artifact lists more files than its manifest can hold: lmi-build reads a manifest whole up to
# reading.MAX_DOCUMENT_BYTES (64 MiB), and each entry is at least {"path":"x","size":0,"sha256":
# "<64 hex digits>"} (97 bytes written compactly): at most 691,843 files. So no listing lmi-build
# makes (an artifact's prefix, a cache entry's, a model's) need go past that many keys.
MIN_MANIFEST_ENTRY_BYTES = len(json.dumps({"path": "x", "size": 0, "sha256": "0" * 64}, separators=(",", ":")))
MAX_ARTIFACT_FILES = MAX_DOCUMENT_BYTES // MIN_MANIFEST_ENTRY_BYTES
MAX_LISTED_KEYS = MAX_ARTIFACT_FILES
MAX_LISTED_PAGES = 10_000
# A pull or verify knows the manifest before it lists: the prefix holds its files, the manifest
# and the tarball, and strays verify reports (the first and a count): one page of them is plenty.
STRAY_KEYS = 1000


def artifact_listing_bound(files: int) -> int:
    """The most keys a listing of the prefix of an artifact of ``files`` files may hold."""
    return min(MAX_LISTED_KEYS, files + 2 + STRAY_KEYS)
_CHUNK = 1024 * 1024
# Seconds a silent S3 server may keep a read waiting, and one request (its retries included) may
# take to get its whole answer (``watched``): a frozen or trickling server must fail in minutes,
# not hang. LMI_BUILD_S3_TIMEOUT overrides it.
DEFAULT_READ_TIMEOUT_S = 60


class S3Unbounded(Exception):
    """An endpoint broke a bound: ``what`` completes "the S3 endpoint <endpoint> ..."."""

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint


# The ranges the S3 variables accept: finite, positive, and small enough that a deadline made from
# them stays a number a timer can wait for (inf or 1e400 was an OverflowError naming nothing).
TIMEOUT_RANGE = (0.1, 86_400.0)  # LMI_BUILD_S3_TIMEOUT, seconds: a day at most
LIST_SECONDS_RANGE = (0.1, 604_800.0)  # LMI_BUILD_S3_LIST_TIMEOUT, seconds: a week at most
RATE_RANGE = (1.0, 1e12)  # LMI_BUILD_S3_MIN_RATE and LMI_BUILD_S3_MAX_BANDWIDTH, bytes/s: up to 1 TB/s


def number_from_env(name: str, default: float, accepted: tuple[float, float], unit: str) -> float:
    """``name``'s value when set (else ``default``): a number within ``accepted``, or one error
    line naming the variable and the range."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    low, high = accepted
    if not low <= number <= high:  # NaN, inf and 1e400 (inf) included
        raise PublishError(f"{name}={value[:40]!r} is not a number of {unit} from {low:g} to {high:g}",
                           hint=f"set it like {name}={default:g}, or unset it")
    return number


def read_timeout_s() -> float:
    """``LMI_BUILD_S3_TIMEOUT``: seconds a silent server may keep a read (and a request) waiting."""
    return number_from_env("LMI_BUILD_S3_TIMEOUT", DEFAULT_READ_TIMEOUT_S, TIMEOUT_RANGE, "seconds")


def min_rate() -> float:
    """``LMI_BUILD_S3_MIN_RATE``: bytes/s below which one object request is given up."""
    return number_from_env(MIN_RATE_ENV, DEFAULT_MIN_RATE, RATE_RANGE, "bytes per second")


def list_seconds() -> float:
    """``LMI_BUILD_S3_LIST_TIMEOUT``: seconds one whole listing may take."""
    return number_from_env(LIST_TIMEOUT_ENV, DEFAULT_LIST_SECONDS, LIST_SECONDS_RANGE, "seconds")


def object_seconds(size: int) -> float:
    """The total time one request for ``size`` bytes may take: a silent server's allowance (the
    read timeout) plus the bytes at the minimum rate."""
    return read_timeout_s() + size / min_rate()


class Deadline:
    """A total bound on one request. ``extend`` adds time lmi-build itself spent (its own
    bandwidth cap sleeping), which is not the server's slowness."""

    def __init__(self, seconds: float, what: str, *, started: float | None = None) -> None:
        self.seconds = seconds
        self.at = (time.monotonic() if started is None else started) + seconds
        self.what = what

    def extend(self, seconds: float) -> None:
        self.at += seconds
        self.seconds += seconds

    def passed(self) -> bool:
        return time.monotonic() > self.at

    @contextmanager
    def watching(self, body: Any) -> Iterator[None]:
        """While the block reads ``body``, its connection is shut down once the deadline passes:
        a read of N bytes loops over the socket until it has them all (http.client, urllib3), so a
        body trickled a byte a second would never return to a check between reads."""
        sock = _socket_of(body)
        if sock is None:
            yield
            return
        token = WATCHDOG.watch(self, functools.partial(shut_down, sock))
        try:
            yield
        finally:
            WATCHDOG.forget(token)

    def check(self, received: int, size: int) -> None:
        if self.passed():
            raise S3Unbounded(
                f"sent {received} of {size} bytes of {self.what} in {self.seconds:.0f} s, slower than "
                f"{min_rate():.0f} bytes/s",
                hint=f"check the endpoint and any proxy before it, and retry; on a link that slow, lower {MIN_RATE_ENV}")


def _socket_of(body: Any) -> socket.socket | None:
    """The socket under a botocore StreamingBody (urllib3's response keeps its connection while the
    body is streamed), or None for any other shape."""
    raw = getattr(body, "_raw_stream", None)
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    return sock if isinstance(sock, socket.socket) else None


def shut_down(sock: socket.socket) -> None:
    """End every blocked read and write on ``sock`` now (they return or raise at once). The plain
    socket's shutdown, also under TLS: ``SSLSocket.shutdown`` would first drop the TLS state that
    the blocked reader is still using."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread for the process: calls the ``cut`` of each watched request whose
    deadline passed (it shuts the request's connection down: the blocked read then returns, and
    the reader sees the deadline passed)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.watched: dict[int, tuple[Deadline, Callable[[], None]]] = {}
        self.tokens = itertools.count()
        self.thread: threading.Thread | None = None

    def watch(self, deadline: Deadline, cut: Callable[[], None]) -> int:
        with self.condition:
            token = next(self.tokens)
            self.watched[token] = (deadline, cut)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="lmi-build-s3-deadlines", daemon=True)
                self.thread.start()
            self.condition.notify()
            return token

    def forget(self, token: int) -> None:
        with self.condition:
            self.watched.pop(token, None)

    def _run(self) -> None:
        while True:
            with self.condition:
                now = time.monotonic()
                for token, (deadline, cut) in list(self.watched.items()):
                    if now > deadline.at:
                        del self.watched[token]
                        cut()  # under the lock: a request that ends now is forgotten first, or cut whole
                soonest = min((deadline.at for deadline, _ in self.watched.values()), default=now + 60)
                self.condition.wait(timeout=max(0.01, soonest - now))


WATCHDOG = _Watchdog()


def check_length(response: dict[str, Any], expected: int, what: str) -> None:
    """Refuse a response whose Content-Length is not ``expected`` (the manifest's size, or the
    listing's) before reading its body."""
    claimed = response.get("ContentLength")
    if claimed is not None and int(claimed) != expected:
        raise S3Unbounded(f"claims {int(claimed)} bytes for {what}, expected {expected}",
                          hint="check the endpoint and any proxy before it; if the object changed, publish it again")


def _read(body: Any, count: int, deadline: Deadline, received: int, size: int) -> bytes:
    """``body.read(count)``, cut short when the deadline passes (then S3Unbounded, whatever the
    cut read raised)."""
    try:
        with deadline.watching(body):
            chunk: bytes = body.read(count)
    except Exception:
        deadline.check(received, size)
        raise
    deadline.check(received + len(chunk), size)
    return chunk


def read_limited(response: dict[str, Any], what: str, *, limit: int) -> bytes:
    """The whole body of a small object (a manifest, a pointer): its Content-Length at most
    ``limit`` (checked before reading), read in chunks within ``object_seconds``."""
    claimed = int(response.get("ContentLength") or 0)
    body = response["Body"]
    if claimed > limit:
        body.close()
        raise S3Unbounded(f"claims {claimed} bytes for {what}, more than the {limit} lmi-build reads",
                          hint="check the endpoint and any proxy before it; the object is not what lmi-build wrote")
    deadline = Deadline(object_seconds(claimed), what)
    chunks: list[bytes] = []
    received = 0
    try:
        while True:
            chunk = _read(body, min(_CHUNK, limit + 1 - received), deadline, received, claimed)
            if not chunk:
                break
            chunks.append(chunk)
            received += len(chunk)
            if received > limit:
                raise S3Unbounded(f"sent more than {limit} bytes for {what}",
                                  hint="check the endpoint and any proxy before it")
    finally:
        body.close()
    return b"".join(chunks)


def stream_chunks(response: dict[str, Any], size: int, what: str, consume: Callable[[bytes], None]) -> None:
    """Hand the body of an object of ``size`` bytes (its Content-Length checked first) to
    ``consume`` chunk by chunk, within ``object_seconds(size)``."""
    check_length(response, size, what)
    body = response["Body"]
    deadline = Deadline(object_seconds(size), what)
    received = 0
    try:
        while received < size:
            chunk = _read(body, min(_CHUNK, size - received), deadline, received, size)
            if not chunk:
                break
            consume(chunk)
            received += len(chunk)
    finally:
        body.close()


def list_pages(client: Any, bucket: str, prefix: str, *, extra: dict[str, Any] | None = None,
               max_keys: int = MAX_LISTED_KEYS) -> Iterator[list[tuple[str, int]]]:
    """The (key, size) pages of ListObjectsV2 under ``prefix``, bounded: a total deadline, at most
    ``max_keys`` keys (``artifact_listing_bound`` where the manifest is known) and
    ``MAX_LISTED_PAGES`` pages, and no continuation token or key seen twice (a server that loops
    would otherwise be listed forever)."""
    what = f"the listing of s3://{bucket}/{prefix}"
    seconds = list_seconds()
    deadline = time.monotonic() + seconds
    hint = "check the endpoint and any proxy before it"
    tokens: set[str] = set()
    keys: set[str] = set()
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, **(extra or {})}
    for _page_number in range(MAX_LISTED_PAGES):
        page = client.list_objects_v2(**request)
        found = [(str(item["Key"]), int(item["Size"])) for item in page.get("Contents", [])]
        repeated = next((key for key, _ in found if key in keys), None)
        if repeated is not None:
            raise S3Unbounded(f"listed s3://{bucket}/{repeated} twice in {what}", hint=hint)
        keys.update(key for key, _ in found)
        if len(keys) > max_keys:
            raise S3Unbounded(f"listed more than {max_keys} keys in {what}",
                              hint="an artifact holds its manifest's files and little else: check the prefix and the endpoint")
        yield found
        if not page.get("IsTruncated"):
            return
        token = str(page.get("NextContinuationToken") or "")
        if not token or token in tokens:
            raise S3Unbounded(f"repeated a continuation token (or sent none) in {what}", hint=hint)
        tokens.add(token)
        if time.monotonic() > deadline:
            raise S3Unbounded(f"did not finish {what} within {seconds:.0f} s ({len(keys)} keys so far)",
                              hint=f"{hint}; for a prefix that large, raise {LIST_TIMEOUT_ENV}")
        request["ContinuationToken"] = token
    raise S3Unbounded(f"sent more than {MAX_LISTED_PAGES} pages in {what}", hint=hint)
