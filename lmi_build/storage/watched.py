"""A total deadline on every S3 request of a client made by ``client.s3_client`` (issue 32 item 6).

botocore bounds each socket read (``read_timeout``), never a whole request: a server or proxy that
trickles the status line, the headers, or the XML of a listing page (or of a HeadObject, PutObject,
CompleteMultipartUpload... answer, bodies botocore reads and parses itself) a byte a second passes
every read and keeps the command waiting for ever. So each request must have its answer, headers
and parsed body, within ``LMI_BUILD_S3_TIMEOUT`` plus the request's own body at the minimum rate
(``bounded.object_seconds``, as for object bodies), its retries included: an attempt is given
what is left of that, and one cut short is not retried. Once the deadline passes the watchdog
shuts the connection's socket down (the blocked read returns at once) and the call raises
``S3Unbounded``, which ``client.translate`` makes one ``error:`` line naming the endpoint.

The deadline ends where botocore hands the answer over: for GetObject that is after the headers,
and its body (any size) is bounded by ``bounded``'s own per-object deadline, never by this one.

Why this way, and not another:
- botocore has no hook on the socket. Its events mark an attempt's start (``before-send``, just
  before the send) and end (``response-received``, after the answer is read and parsed, or failed)
  in the calling thread, and the request's ``context`` (one dict per API call, kept by each
  attempt) carries the call's start across retries.
- Which connection an attempt uses is decided inside urllib3. A pool's ``ConnectionCls`` is
  urllib3's documented extension point: our connection classes tell the thread's current attempt
  "I am yours" when they connect or send, so the watchdog shuts down exactly that socket, never
  a pooled one another thread now uses.
- A socket timeout shrunk before each read needs a hook before each read, which neither library
  has; signals reach only the main thread (s3transfer uploads in others); a thread per request
  would cost more than the request.
- The one private part: botocore keeps its pool classes in ``URLLib3Session._pool_classes_by_scheme``
  (the HTTP session class is not configurable through boto3). ``install`` refuses to make a
  client without it rather than make one with no total bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import botocore
from botocore.awsrequest import (
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)
from botocore.utils import determine_content_length

from lmi_build.core.errors import PublishError
from lmi_build.storage.bounded import MIN_RATE_ENV, WATCHDOG, Deadline, S3Unbounded, min_rate, shut_down
from lmi_build.storage.transfer import PART_SIZE

TIMEOUT_ENV = "LMI_BUILD_S3_TIMEOUT"
_STARTED = "lmi_build_started"  # the key in botocore's per-call context: when the call's first attempt began
_ATTEMPT = "_lmi_build_attempt"  # the attribute of a connection: the attempt that uses it now


@dataclass(eq=False)
class _Attempt:
    """One attempt of one request, from ``before-send`` to ``response-received``."""

    deadline: Deadline
    operation: str
    connection: Any = None  # the urllib3 connection it uses, once it connects or sends
    body_bytes: int = 0  # what the request sends: the kernel may still be draining it when the answer is awaited
    cut: bool = False
    token: int = -1


_current = threading.local()  # .attempt: the _Attempt the thread is making now, or None


def _claim(connection: Any) -> None:
    """The connection now carries the calling thread's attempt, if any."""
    attempt: _Attempt | None = getattr(_current, "attempt", None)
    with WATCHDOG.condition:
        setattr(connection, _ATTEMPT, attempt)
        if attempt is None:
            return
        attempt.connection = connection
        if attempt.cut and connection.sock is not None:
            shut_down(connection.sock)


def _cut(attempt: _Attempt) -> None:
    """The watchdog's action when ``attempt`` is past its deadline (called under its lock)."""
    attempt.cut = True
    connection = attempt.connection
    if connection is not None and getattr(connection, _ATTEMPT, None) is attempt and connection.sock is not None:
        shut_down(connection.sock)


def _end(attempt: _Attempt) -> bool:
    """Stop watching ``attempt`` (its connection may serve another now); True when it was cut."""
    WATCHDOG.forget(attempt.token)
    with WATCHDOG.condition:
        connection = attempt.connection
        if connection is not None and getattr(connection, _ATTEMPT, None) is attempt:
            setattr(connection, _ATTEMPT, None)
        return attempt.cut


class _ClaimsItsAttempt:
    """Mixed in before botocore's connection classes: each connect and request claims the
    connection for the attempt running in this thread, so the watchdog cuts this socket only."""

    def connect(self) -> None:
        _claim(self)
        super().connect()  # type: ignore[misc]

    def request(self, method: str, url: str, body: Any = None, headers: Mapping[str, Any] | None = None,
                *args: Any, **kwargs: Any) -> Any:
        _claim(self)
        return super().request(method, url, body, headers, *args, **kwargs)  # type: ignore[misc]

    def getresponse(self) -> Any:
        """The answer to a request that sent a body is awaited up to what is left of the request's
        deadline, not one silent read's timeout: the last write returns once the kernel holds the
        tail of the body (megabytes, in the socket buffers at both ends), and a link taking it at a
        steady 200 KiB/s still drains it for seconds before the server can answer. The deadline
        (LMI_BUILD_S3_TIMEOUT + body / LMI_BUILD_S3_MIN_RATE, README) bounds that wait; the
        answer's own reads get the silent-read timeout again."""
        attempt: _Attempt | None = getattr(_current, "attempt", None)
        silent: Any = getattr(self, "timeout", None)
        if attempt is not None and attempt.body_bytes and isinstance(silent, (int, float)):
            self.timeout = max(silent, attempt.deadline.at - time.monotonic())
        try:
            response = super().getresponse()  # type: ignore[misc]
        finally:
            self.timeout = silent
        if self.sock is not None:  # type: ignore[attr-defined]
            self.sock.settimeout(silent)  # type: ignore[attr-defined]
        return response


# The ignores: mypy re-checks botocore's own AWSConnection/HTTPConnection combination here.
class WatchedHTTPConnection(_ClaimsItsAttempt, AWSHTTPConnection):  # type: ignore[misc]
    pass


class WatchedHTTPSConnection(_ClaimsItsAttempt, AWSHTTPSConnection):  # type: ignore[misc]
    pass


class WatchedHTTPConnectionPool(AWSHTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSConnectionPool(AWSHTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


def _body_bytes(request: Any) -> int:
    """The bytes of the request's body, which the server may take its time to receive: the
    decoded length of an aws-chunked body, else its Content-Length, else its length."""
    headers = request.headers
    for name in ("X-Amz-Decoded-Content-Length", "Content-Length"):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0, int(value))
            except ValueError:
                continue
    body = request.body
    if body is None:
        return 0
    if isinstance(body, (bytes, bytearray, memoryview)):
        return len(body)
    length = determine_content_length(body)
    if length is None:  # a stream of unknown length: at most one part of lmi-build's uploads
        return PART_SIZE
    return int(length)


@dataclass(frozen=True)
class _Bounds:
    """The settings of one client, read once when it is made."""

    answer_seconds: float  # LMI_BUILD_S3_TIMEOUT: a request with no body
    send_rate: float  # bytes/s a request's body may be sent at, at the slowest

    def seconds(self, request: Any) -> float:
        return self.answer_seconds + _body_bytes(request) / self.send_rate

    def before_send(self, request: Any, event_name: str = "", **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1] or "S3"
        context = getattr(request, "context", None)
        now = time.monotonic()
        started = context.setdefault(_STARTED, now) if isinstance(context, dict) else now
        seconds = self.seconds(request)
        attempt = _Attempt(Deadline(seconds, operation, started=started), operation, body_bytes=_body_bytes(request))
        _current.attempt = attempt
        if attempt.deadline.passed():  # retries (and their back-off) used the time up
            raise self.unbounded(attempt)
        attempt.token = WATCHDOG.watch(attempt.deadline, lambda: _cut(attempt))

    def response_received(self, exception: BaseException | None = None, **_: Any) -> None:
        attempt: _Attempt | None = getattr(_current, "attempt", None)
        _current.attempt = None
        if attempt is None:
            return
        cut = _end(attempt)
        if isinstance(exception, S3Unbounded):
            raise exception
        if cut and exception is not None:  # raised here, it is not retried: the time is up
            raise self.unbounded(attempt) from exception

    def unbounded(self, attempt: _Attempt) -> S3Unbounded:
        return S3Unbounded(
            f"did not complete a {attempt.operation} request within {attempt.deadline.seconds:.0f} s",
            hint=f"check the endpoint and any proxy before it, and retry; if it is only slow, raise {TIMEOUT_ENV} "
                 f"(and, for big uploads, lower {MIN_RATE_ENV})")


def install(client: Any, *, answer_seconds: float, max_bandwidth: int | None) -> None:
    """Give every request of ``client`` a total deadline (see the module's docstring)."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    classes = getattr(session, "_pool_classes_by_scheme", None)
    if not isinstance(classes, dict) or not {"http", "https"} <= set(classes):
        raise PublishError(f"botocore {botocore.__version__} keeps its connections where lmi-build cannot bound "
                           "a request's total time", hint="install the botocore release lmi-build was tested with, or report this")
    # In place: botocore's pool managers (the proxy ones it makes later too) share this very dict.
    classes["http"] = WatchedHTTPConnectionPool
    classes["https"] = WatchedHTTPSConnectionPool
    rate = min_rate()
    if max_bandwidth:  # lmi-build's own cap, shared by all the client's connections, slows each body
        rate = min(rate, max_bandwidth / max(1, int(client.meta.config.max_pool_connections or 1)))
    bounds = _Bounds(answer_seconds, rate)
    client.meta.events.register("before-send.s3", bounds.before_send, unique_id="lmi-build-deadline-send")
    client.meta.events.register("response-received.s3", bounds.response_received,
                                unique_id="lmi-build-deadline-received")
