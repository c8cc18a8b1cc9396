"""Build events: what a long command is doing, as JSON lines a pipeline or a dashboard can follow.

One mechanism, any number of listeners: a step, a byte count, a retry, a cache hit is announced here
(``step``, ``ByteEvents``, ``emit``) by whichever layer does the work, with no callback passed down.
``--events PATH`` (``EventsFile``) writes every event as a JSON line; a matrix worker forwards its
events to the driver (``listening``), whose live view shows each build's step and time left and
whose own ``--events`` file gets them with the build's name. docs/EVENTS.md lists the types and
fields; ``lmi_build/data/events.schema.json`` is their JSON Schema.

Every event is bounded (long strings shortened, a cap on the byte events of one transfer) and
redacted as the terminal output is. Writing events never fails a command: a sink that cannot be
written warns once and stops.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from lmi_build.core.errors import MESSAGE_CHARS, bounded
from lmi_build.core.redaction import command_secrets, redact_text, redact_tree

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "data" / "events.schema.json"
# A byte count sends at most one event per this many seconds (and its final one), and at most
# MAX_BYTE_EVENTS in all: a day-long transfer is not a million lines.
BYTES_EVERY_S = 0.5
MAX_BYTE_EVENTS = 200
EVENT_CHARS = MESSAGE_CHARS  # the longest string an event carries
MAX_EVENT_ITEMS = 50  # the longest list, the most keys, an event carries

Event = dict[str, Any]
Listener = Callable[[Event], None]

_listeners: list[Listener] = []
_lock = threading.RLock()  # transfers count bytes from many threads
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return bounded(value, EVENT_CHARS)
    if isinstance(value, dict):
        return {str(key)[:100]: _bounded(item) for key, item in list(value.items())[:MAX_EVENT_ITEMS]}
    if isinstance(value, (list, tuple)):
        return [_bounded(item) for item in list(value)[:MAX_EVENT_ITEMS]]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return bounded(str(value), EVENT_CHARS)


def make(kind: str, **fields: Any) -> Event:
    """One event: its schema version, timestamp and type, and the fields that have a value."""
    return {"schema": SCHEMA_VERSION, "time": _now(), "type": kind,
            **{key: value for key, value in fields.items() if value is not None}}


def emit(kind: str, **fields: Any) -> None:
    """Announce one event to every listener (nothing happens when none listens)."""
    if _listeners:
        forward(make(kind, **fields))


def forward(event: Event) -> None:
    """Hand an event already made (a matrix worker's, received by the driver) to every listener."""
    if not _listeners:
        return
    shown = redact_tree(_bounded(event), command_secrets())
    with _lock:
        for listener in list(_listeners):
            with contextlib.suppress(Exception):  # a listener's fault never fails the work it watches
                listener(shown)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` receives every event announced while the block runs."""
    with _lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)


def listened() -> bool:
    return bool(_listeners)


@contextmanager
def step(name: str, *, estimate_s: float | None = None, detail: str | None = None) -> Iterator[None]:
    """A step of a build: ``step_start`` (with the plan's time estimate, where it has one), then
    ``step_end`` with its seconds and how it ended (ok, failed, interrupted)."""
    emit("step_start", step=name, estimate_s=estimate_s, detail=detail)
    started = time.monotonic()
    status = "failed"
    try:
        yield
        status = "ok"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        emit("step_end", step=name, status=status, seconds=round(time.monotonic() - started, 3))


class ByteEvents:
    """The ``bytes`` events of one transfer or conversion: done and total (None: not known),
    throttled to one per BYTES_EVERY_S and capped at MAX_BYTE_EVENTS; ``finish`` sends the last."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what, self.total = what, total
        self.done = 0
        self.sent = 0
        self.last = -math.inf  # the first is sent at once: time.monotonic() may start near 0 (a fresh host's uptime)
        self.last_done = -1
        self.lock = threading.Lock()

    def add(self, count: int) -> None:
        with self.lock:
            self.done += count
        self._maybe_send()

    def set(self, done: int) -> None:
        with self.lock:
            self.done = done
        self._maybe_send()

    def _maybe_send(self) -> None:
        if not _listeners:
            return
        now = time.monotonic()
        with self.lock:
            if now - self.last < BYTES_EVERY_S or self.sent >= MAX_BYTE_EVENTS - 1 or self.done == self.last_done:
                return  # too soon, the cap reached (one is kept for the final), or nothing new
            self.last, self.sent, self.last_done = now, self.sent + 1, self.done
            done = self.done
        emit("bytes", what=self.what, done=max(done, 0), total=self.total, final=False)

    def finish(self, *, complete: bool = True) -> None:
        """The last event: what was done (a stopped transfer's, when ``complete`` is False)."""
        emit("bytes", what=self.what, done=max(self.done, 0), total=self.total, final=True, complete=complete)


class EventsFile:
    """The ``--events`` sink: one JSON line per event, flushed, to a file (``-``: stderr). A write
    that fails (a closed pipe, a full disk) warns once and stops the sink; the command goes on."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.stream: IO[str] | None = None
        self.failed = False
        if where == "-":
            self.stream = sys.stderr
        else:
            # Opened now: a path that cannot be written is a usage error before any work (OSError).
            self.stream = open(Path(where).expanduser(), "w", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def __call__(self, event: Event) -> None:
        if self.failed or self.stream is None:
            return
        try:
            self.stream.write(json.dumps(event, separators=(",", ":"), default=str) + "\n")
            self.stream.flush()
        except (OSError, ValueError) as error:
            self.failed = True
            reason = getattr(error, "strerror", None) or type(error).__name__
            # Straight to stderr (this module sits under the console's): once, and never raising.
            with contextlib.suppress(Exception):
                sys.stderr.write(redact_text(f"warning: --events {self.where}: events could not be written "
                                             f"({reason}); no more are written\n", command_secrets()))
                sys.stderr.flush()

    def close(self) -> None:
        if self.stream is not None and self.where != "-":
            with contextlib.suppress(OSError, ValueError):
                self.stream.close()
        self.stream = None


_sink: EventsFile | None = None
_result: Any = None  # the command's result (what --json prints), for the ``result`` event


def keep_result(data: Any) -> None:
    global _result
    if _sink is not None:
        _result = data


def take_result() -> Any:
    global _result
    data, _result = _result, None
    return data


def open_sink(where: str) -> None:
    """Start writing every event to ``where`` (``--events``) until ``close_sink``."""
    global _sink
    close_sink()
    _sink = EventsFile(where)
    with _lock:
        _listeners.append(_sink)


def close_sink(**result: Any) -> None:
    """The ``result`` event (when a sink is open: the command's exit status and error), then the sink closed."""
    global _sink
    sink, _sink = _sink, None
    if sink is None:
        return
    if result:
        emit("result", **result)
    with _lock:
        if sink in _listeners:
            _listeners.remove(sink)
    sink.close()
