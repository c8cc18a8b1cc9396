"""A vendor tool's processes die with lmi-build, however lmi-build ends.

A tool runs in a process group of its own (so a timeout or Ctrl-C can kill all of it), which also
means a signal to lmi-build's group does not reach it, and a SIGKILLed lmi-build runs no cleanup:
the compiler kept running, and the rerun deleted the work directory under it. Two guards:

- ``die_with_parent``: the tool itself gets SIGKILL when lmi-build dies (Linux ``PR_SET_PDEATHSIG``).
- ``group_reaper``: a small process in a session of its own waits on a pipe from lmi-build; when the
  pipe closes without the "finished" byte (lmi-build died, or the step failed), it kills the tool's
  whole group, the subprocesses the tool started included (which PR_SET_PDEATHSIG does not reach).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
FINISHED = b"x"  # the byte the reaper's program below compares with
# Runs in the reaper: reads one byte from stdin; anything but FINISHED (EOF: lmi-build is gone)
# kills the group named by argv[1].
_REAPER = """
import os, signal, sys
try:
    word = os.read(0, 1)
except OSError:
    word = b""
if word != b"x":
    try:
        os.killpg(int(sys.argv[1]), signal.SIGKILL)
    except OSError:
        pass
"""


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when this process dies, or None where
    the platform has no such thing. Everything it calls is resolved before the fork."""
    if not sys.platform.startswith("linux"):
        return None

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    kill, getppid, getpid = os.kill, os.getppid, os.getpid

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if getppid() != parent:  # the parent died before prctl took effect: no signal will come
            kill(getpid(), signal.SIGKILL)

    return set_death_signal


@contextmanager
def group_reaper(group: int) -> Iterator[None]:
    """Kill process group ``group`` unless the block ends normally: when it raises, or when this
    process dies inside it (even by SIGKILL: the reaper sees its pipe close)."""
    read_end, write_end = os.pipe()
    try:
        reaper: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, str(group)], stdin=read_end,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # no reaper (no interpreter to start): PR_SET_PDEATHSIG still covers the tool itself
        reaper = None
    finally:
        os.close(read_end)
    finished = False
    try:
        yield
        finished = True
    finally:
        with contextlib.suppress(OSError):
            if finished:
                os.write(write_end, FINISHED)
        os.close(write_end)
        if reaper is not None:
            reaper.wait()
