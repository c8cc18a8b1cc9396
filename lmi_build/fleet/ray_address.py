"""The Ray address of ``matrix --executor ray``, checked before ``ray.init`` sees it.

``ray.init`` given a port that answers garbage retried for over 7 minutes without a word; a
``ray://`` address without ``ray[client]``, or an address it cannot parse, ended in a traceback
that printed the address, password included; a temporary directory whose Ray socket path is over
the AF_UNIX limit ended in "error: Success". So, before Ray is imported:

- the address is parsed: ``auto``, ``local``, ``host:port`` (the GCS), ``ray://host:port`` (Ray
  client: needs ``ray[client]``); any other scheme is refused. Every address shown is redacted.
- a ``host:port`` or ``ray://`` address must answer as a gRPC server (Ray's GCS and its client
  server are both gRPC) within ``PROBE_SECONDS``: the HTTP/2 preface is sent and a SETTINGS frame
  must come back. A closed port, a silent one and one that speaks anything else fail in that bound.
- when Ray will start on this host (no address, or ``local``), the longest socket path of its
  session directory must fit AF_UNIX (``ray/_private/utils.py validate_socket_filepath``).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.redaction import redact_text

PROBE_SECONDS = 10.0
# What an HTTP/2 client sends first (RFC 9113 3.4), then an empty SETTINGS frame; the server's
# first frame must be SETTINGS (type 4) on stream 0.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4
# Ray's session directory: <temp>/ray/session_<%Y-%m-%d_%H-%M-%S_%f>_<pid>/sockets/<name>, the
# longest name being plasma_store (ray/_private/node.py: _session_name, _prepare_socket_file).
_SESSION = "session_0000-00-00_00-00-00_000000_{pid}"
_LONGEST_SOCKET = "sockets/plasma_store"


class RayAddressError(LmiBuildError):
    code = "ray_address"


@dataclass(frozen=True)
class RayTarget:
    address: str | None  # what ray.init gets
    shown: str  # for messages: redacted


def resolve_ray_address(flag: str | None) -> RayTarget:
    """The address ray.init will use (``--ray-address``, else ``RAY_ADDRESS``, else None: a running
    Ray of this host or a new local one), checked as described in the module docstring."""
    given = flag if flag is not None else os.environ.get("RAY_ADDRESS")
    source = "--ray-address" if flag is not None else "RAY_ADDRESS"
    address = (given or "").strip() or None
    if address is None or address == "local":
        check_socket_path()
        return RayTarget(address=address, shown=address or "a local Ray")
    shown = shown_address(address)
    if address == "auto":
        return RayTarget(address=address, shown=shown)
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "ray"):
        raise RayAddressError(f"{source} {shown} is not a Ray address",
                              hint="use host:port (the head's GCS port, 6379), ray://host:10001 (Ray client) or auto")
    if scheme == "ray" and importlib.util.find_spec("grpc") is None:
        raise RayAddressError(f"{source} {shown} is a Ray client address, and Ray client is not installed",
                              hint="pip install 'ray[client]', or use the head's host:port from a host of the cluster")
    host, port = _host_port(rest, source, shown)
    probe_grpc(host, port, f"{source} {shown}")
    return RayTarget(address=address, shown=shown)


def shown_address(address: str) -> str:
    """The address as messages show it: whatever precedes an ``@`` in its host part (a user and
    password, with or without a scheme) is ``***``, and the general redaction applies."""
    scheme, separator, rest = address.rpartition("://")
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return redact_text(f"{scheme}{separator}{authority}{slash}{tail}")


def _host_port(text: str, source: str, shown: str) -> tuple[str, int]:
    hint = "use host:port, e.g. 10.0.0.5:6379 or ray://head:10001"
    try:
        parts = urlsplit(f"//{text}")
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is no number, or out of range
        raise RayAddressError(f"{source} {shown} is not host:port", hint=hint) from None
    if parts.username is not None or parts.password is not None:
        raise RayAddressError(f"{source} {shown} carries credentials, which a Ray address cannot take", hint=hint)
    if not host or port is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise RayAddressError(f"{source} {shown} is not host:port", hint=hint)
    return host, port


def probe_grpc(host: str, port: int, what: str, *, seconds: float = PROBE_SECONDS) -> None:
    """Within ``seconds``: connect, send the HTTP/2 preface, read a SETTINGS frame back."""
    deadline = time.monotonic() + seconds
    hint = "check the address and that the Ray head is running (ray status on the head)"
    try:
        with socket.create_connection((host, port), timeout=seconds) as connection:
            connection.sendall(_PREFACE)
            header = b""
            while len(header) < 9:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                connection.settimeout(remaining)
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except TimeoutError:
        raise RayAddressError(f"{what} did not answer as a Ray head within {seconds:g} s", hint=hint) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RayAddressError(f"cannot connect to {what} ({reason})", hint=hint) from None
    if len(header) < 9 or header[3] != _SETTINGS or int.from_bytes(header[5:9], "big") & 0x7FFFFFFF != 0:
        raise RayAddressError(f"{what} does not speak Ray's protocol (gRPC): is it the head's GCS port?", hint=hint)


def ray_temp_dir() -> str:
    """The directory Ray starts its sessions under (ray/_common/utils.py get_default_ray_temp_dir)."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return os.path.join(base, "ray")


def check_socket_path() -> None:
    """Refuse, before Ray starts, a temporary directory under which Ray's sockets cannot be bound."""
    if sys.platform == "win32":
        return
    limit = (104 if sys.platform.startswith("darwin") else 108) - 1
    path = os.path.join(ray_temp_dir(), _SESSION.format(pid=os.getpid()), _LONGEST_SOCKET)
    if len(path.encode("utf-8")) > limit:
        raise RayAddressError(
            f"Ray's socket path under {ray_temp_dir()} would be {len(path.encode('utf-8'))} bytes, over the {limit} "
            "a Unix socket path may have", hint="set RAY_TMPDIR to a short directory, e.g. RAY_TMPDIR=/tmp/ray-tmp")
