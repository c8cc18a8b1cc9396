"""The process of one local matrix build (``python -m lmi_build.fleet.worker FD PARENT``): reads
its ``Job`` as JSON on stdin, runs it, and writes its start event, its build's events (steps, byte
counts: ``lmi_build.reporting.events``) and then its result as JSON lines to the descriptor FD.

One process per build, not a pool: a worker killed by SIGKILL (or the kernel's OOM killer) fails
only its own build, which the driver may run again; the others go on. No multiprocessing either:
its resource tracker was one more process to outlive a killed driver, and killing it printed a
KeyError traceback per semaphore. The worker dies with its driver (``die_with_parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from lmi_build.core.errors import Terminated
from lmi_build.fleet.job import Job, run_job

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_SECONDS = 0.5


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when ``parent`` exits (SIGKILL, SIGHUP, a crash): the build then
    cleans up as on Ctrl-C. Linux: PR_SET_PDEATHSIG (checked once more after it is set, in case the
    parent died first); elsewhere a thread that watches the parent's pid."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc_name is not None:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0:
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="lmi-build-parent-watch", daemon=True).start()


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not interrupt the cleanup
    raise Terminated()


# The kinds of line a worker writes: its start, each event of its build, its result.
MESSAGE_KINDS = ("started", "event", "result")
_channel_lock = threading.Lock()  # events come from a transfer's threads too: one whole line at a time


def _send(channel: IO[str], kind: str, payload: dict[str, object]) -> None:
    with _channel_lock:
        channel.write(json.dumps({kind: payload}, default=str) + "\n")
        channel.flush()


def _forward_event(channel: IO[str]) -> Callable[[dict[str, Any]], None]:
    def forward(event: dict[str, Any]) -> None:
        with contextlib.suppress(OSError, ValueError):  # progress only: a lost event never fails a build
            _send(channel, "event", event)

    return forward


def main(argv: list[str]) -> int:
    """Run the job read from stdin; 0 once its result is written (a failed build is a result too)."""
    channel_fd, parent = int(argv[0]), int(argv[1])
    # SIGINT stays ignored as the driver spawned it: only the driver answers Ctrl-C and stops the
    # workers with SIGTERM, which cleans up as an interrupt does.
    signal.signal(signal.SIGTERM, _terminate)
    die_with_parent(parent)
    job = Job.model_validate_json(sys.stdin.read())
    with os.fdopen(channel_fd, "w", encoding="utf-8") as channel:
        try:
            result = run_job(job, lambda started: _send(channel, "started", started.model_dump()),
                             _forward_event(channel))
        except KeyboardInterrupt:  # SIGTERM: the build cleaned up; the driver reports it
            return 128 + signal.SIGTERM
        _send(channel, "result", result.model_dump())
    # The interpreter's exit would garbage-collect all of torch for seconds: the work is done.
    gc.freeze()
    return 0


def parse_message(line: bytes) -> tuple[str, dict[str, object]] | None:
    """A worker's line as (kind, payload), or None for anything else."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or len(message) != 1:
        return None
    kind, payload = next(iter(message.items()))
    return (kind, payload) if kind in MESSAGE_KINDS and isinstance(payload, dict) else None



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
