"""Real socket servers on 127.0.0.1 that misbehave, for the hostile-endpoint tests.

- ``GarbageServer``: accepts connections and answers every one with bytes that are no protocol
  (an S3 endpoint or a Ray GCS address that points at the wrong service).
- ``LyingS3Proxy``: an HTTP proxy in front of the real SeaweedFS of the test session. Every request
  is forwarded unchanged (its signature stays valid: the Host header is the proxy's, as signed) and
  every answer is the server's own, except for the requests a ``Lie`` matches: it trickles a body
  or the status line and headers a byte at a time, claims a Content-Length of 10^15, answers a
  listing that never ends, or is merely slow (a big body sent over seconds, an upload answered late).
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import itertools
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

GARBAGE = b"\x00\xffthis is not a protocol you know\r\n\x16\x03" * 64


class _QuietOnHangUp(ThreadingHTTPServer):
    """A client that refuses a lie hangs up on the proxy, which is what the tests provoke: socketserver would
    print that reset's traceback to stderr, which the in-process CLI's output shares (and the tests check that
    output holds no traceback). Any other error is printed as socketserver prints it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class GarbageServer:
    """Listens on 127.0.0.1; each connection gets ``GARBAGE`` (after reading what the client sends
    first, as a confused server would) and stays open until the client leaves."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.socket.settimeout(0.2)
        while not self._stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(0.5)
            with contextlib.suppress(OSError):
                connection.recv(65536)
            with contextlib.suppress(OSError):
                while not self._stop.is_set():
                    connection.sendall(GARBAGE)
                    time.sleep(0.5)

    def close(self) -> None:
        self._stop.set()
        self.socket.close()


LieKind = Literal["trickle", "trickle_headers", "slow", "huge_length", "endless_listing", "repeating_listing",
                  "redirect_301", "redirect_307", "denied", "clock_skew", "slow_reader"]
REFUSALS = ("redirect_301", "redirect_307", "denied", "clock_skew")  # answered by the proxy, never forwarded
SKEW_SECONDS = 3600  # clock_skew: the server's Date is an hour ahead of this machine's
REDIRECT_REGION = "eu-west-3"  # the region a redirect names (S3's x-amz-bucket-region)
HUGE = 10**15


@dataclass
class Lie:
    """What to do instead of forwarding, for ``method`` requests whose path ends with ``key_suffix``
    (objects), or with ``listing`` for the requests that list the bucket."""

    kind: LieKind
    key_suffix: str = ""
    byte_interval: float = 0.1  # trickle, trickle_headers: seconds between two bytes
    method: str = "GET"
    listing: bool = False
    seconds: float = 4.0  # slow: how long the answer takes in all
    skip: int = 0  # the first requests it matches that are answered truly
    page_keys: int = 1  # endless_listing: keys on each page (S3 sends up to 1,000)
    rate: int = 200 * 1024  # slow_reader: bytes/s the proxy reads the request body at, then forwards it

    def passes(self) -> bool:
        """True for the first ``skip`` requests it matches."""
        self.skip -= 1
        return self.skip >= 0

    def matches(self, method: str, path: str) -> bool:
        parts = urlsplit(path)
        listing = "list-type" in parse_qs(parts.query)
        if self.kind in ("endless_listing", "repeating_listing"):
            return method == "GET" and listing
        if self.kind in REFUSALS:  # the method's requests (any, with method "")
            return (not self.method or method == self.method) and parts.path.endswith(self.key_suffix)
        if method != self.method or listing != self.listing:
            return False
        return listing or parts.path.endswith(self.key_suffix)


@dataclass
class LyingS3Proxy:
    upstream: str  # http://host:port of the real server
    lies: list[Lie] = field(default_factory=list)
    served_lies: int = 0

    def __post_init__(self) -> None:
        proxy = self
        upstream = urlsplit(self.upstream)
        pages = itertools.count(1)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                lie = next((lie for lie in proxy.lies if lie.matches(self.command, self.path)), None)
                if lie is not None and lie.passes():
                    lie = None
                if lie is not None and lie.kind == "slow_reader":  # a link that takes the upload slowly
                    proxy.served_lies += 1
                    body = self._read_slowly(length, lie.rate) if length else None
                    lie = None
                else:
                    body = self.rfile.read(length) if length else None
                if lie is not None and lie.kind in ("endless_listing", "repeating_listing"):
                    proxy.served_lies += 1
                    self._endless_page(next(pages), fresh=lie.kind == "endless_listing", keys=lie.page_keys)
                    return
                if lie is not None and lie.kind in REFUSALS:
                    proxy.served_lies += 1
                    self._refuse(lie.kind)
                    return
                upstream_connection = http.client.HTTPConnection(upstream.hostname or "127.0.0.1", upstream.port,
                                                                 timeout=60)
                upstream_connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    upstream_connection.putheader(name, value)
                upstream_connection.endheaders(body)
                answer = upstream_connection.getresponse()
                data = answer.read()
                upstream_connection.close()
                headers = [(name, value) for name, value in answer.getheaders()
                           if name.lower() not in ("content-length", "transfer-encoding", "connection")]
                if lie is not None and answer.status == 200:
                    proxy.served_lies += 1
                    # A HEAD answer has no body but the object's Content-Length.
                    length = int(answer.getheader("Content-Length", "0")) if self.command == "HEAD" else len(data)
                    self._lie(lie, headers, data, length)
                    return
                self.send_response(answer.status, answer.reason)
                for name, value in headers:
                    self.send_header(name, value)
                # A HEAD answer has no body but the object's Content-Length.
                self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD"
                                 else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _lie(self, lie: Lie, headers: list[tuple[str, str]], data: bytes, length: int) -> None:
                self.close_connection = True
                if self.command == "HEAD":
                    data = b""
                if lie.kind == "trickle_headers":
                    self._trickle_headers(headers, data, length, piece=1, interval=lie.byte_interval)
                    return
                if lie.kind == "slow" and not data:  # an answer without a body (an upload's): its head in 10 pieces
                    self._trickle_headers(headers, data, length, piece=0, interval=lie.seconds / 10)
                    return
                self.send_response(200)
                for name, value in headers:
                    self.send_header(name, value)
                claimed = HUGE if lie.kind == "huge_length" else len(data)
                self.send_header("Content-Length", str(claimed))
                self.end_headers()
                with contextlib.suppress(OSError):
                    if lie.kind == "huge_length":
                        self.wfile.write(data)
                        self.wfile.flush()
                        time.sleep(120)  # and then nothing: the rest of the petabyte never comes
                        return
                    if lie.kind == "slow":  # all of it, in ten pieces over the seconds
                        piece = -(-len(data) // 10) or 1
                        for start in range(0, len(data), piece):
                            time.sleep(lie.seconds / 10)
                            self.wfile.write(data[start:start + piece])
                            self.wfile.flush()
                        return
                    for index in range(len(data)):
                        self.wfile.write(data[index:index + 1])
                        self.wfile.flush()
                        time.sleep(lie.byte_interval)

            def _trickle_headers(self, headers: list[tuple[str, str]], data: bytes, length: int, *, piece: int,
                                 interval: float) -> None:
                """The status line and the headers ``piece`` bytes at a time (0: in ten pieces),
                ``interval`` seconds apart (each read of the client gets some within its timeout),
                then the body at once."""
                head = "".join(["HTTP/1.1 200 OK\r\n", *(f"{name}: {value}\r\n" for name, value in headers),
                                f"Content-Length: {length}\r\n", "Connection: close\r\n\r\n"]).encode("latin-1")
                piece = piece or -(-len(head) // 10)
                with contextlib.suppress(OSError):
                    for start in range(0, len(head), piece):
                        self.wfile.write(head[start:start + piece])
                        self.wfile.flush()
                        time.sleep(interval)
                    self.wfile.write(data)
                    self.wfile.flush()

            def _endless_page(self, number: int, *, fresh: bool, keys: int = 1) -> None:
                """A truncated page with a new continuation token each time; ``fresh``: ``keys`` new
                keys each time too, else the same key again."""
                query = parse_qs(urlsplit(self.path).query)
                prefix = query.get("prefix", [""])[0]
                contents = "".join(
                    f"<Contents><Key>{prefix}endless-{number if fresh else 1:09d}-{index:04d}</Key><Size>1</Size>"
                    '<LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>"0"</ETag>'
                    "<StorageClass>STANDARD</StorageClass></Contents>" for index in range(keys if fresh else 1))
                page = ('<?xml version="1.0" encoding="UTF-8"?>'
                        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                        f"<Name>bucket</Name><Prefix>{prefix}</Prefix><KeyCount>{keys}</KeyCount><MaxKeys>1000</MaxKeys>"
                        f"<IsTruncated>true</IsTruncated><NextContinuationToken>token-{number}</NextContinuationToken>"
                        f"{contents}</ListBucketResult>").encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def _read_slowly(self, length: int, rate: int) -> bytes:
                """The request body at ``rate`` bytes/s, a tenth of a second's worth at a time: the
                client's kernel takes what fits in its buffers at once and drains the rest at this pace."""
                pieces: list[bytes] = []
                left = length
                while left:
                    piece = self.rfile.read(min(left, max(1, rate // 10)))
                    if not piece:
                        break
                    pieces.append(piece)
                    left -= len(piece)
                    time.sleep(0.1)
                return b"".join(pieces)

            def _refuse(self, kind: LieKind) -> None:
                """What S3 answers for a bucket of another region (301 PermanentRedirect without a
                Location, or 307 TemporaryRedirect to the same URL: a redirect that goes round), for
                credentials without the permission (403 AccessDenied), or for a request signed by a
                clock an hour off the server's (403 RequestTimeTooSkewed; its Date says the server's
                time). A HEAD answer has the status and headers only, as S3's."""
                status, code = {"redirect_301": (301, "PermanentRedirect"), "redirect_307": (307, "TemporaryRedirect"),
                                "denied": (403, "AccessDenied"), "clock_skew": (403, "RequestTimeTooSkewed")}[kind]
                host = self.headers.get("Host", "")
                bucket = urlsplit(self.path).path.lstrip("/").split("/", 1)[0]
                body = ("" if self.command == "HEAD" else
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>refused by '
                        f"the test proxy</Message><Bucket>{bucket}</Bucket><Endpoint>{host}</Endpoint></Error>").encode()
                self.send_response_only(status)
                self.send_header("Server", "hostile-proxy")
                skew = SKEW_SECONDS if kind == "clock_skew" else 0
                self.send_header("Date", email.utils.formatdate(time.time() + skew, usegmt=True))
                if kind.startswith("redirect"):
                    self.send_header("x-amz-bucket-region", REDIRECT_REGION)
                if kind == "redirect_307":
                    self.send_header("Location", f"http://{host}{self.path}")
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        self.server = _QuietOnHangUp(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def lying_proxy(upstream: str, *lies: Lie) -> Iterator[LyingS3Proxy]:
    proxy = LyingS3Proxy(upstream, list(lies))
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def garbage_server() -> Iterator[GarbageServer]:
    server = GarbageServer()
    try:
        yield server
    finally:
        server.close()

