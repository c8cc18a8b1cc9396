"""Run a command the way a person does: at a real pseudo-terminal with a size and TERM set.

A pipe hides what only a terminal shows: rich draws live progress only at a terminal (and once
redirected sys.stdout/sys.stderr into itself there, hanging every build), a terminal has a width,
and Ctrl-C is SIGINT to the terminal's foreground process group, not to one process. This module
gives the command a new session whose controlling terminal is the pty's slave side, reads the
master side until the command exits, and can press Ctrl-C the way the terminal's line discipline
does: SIGINT to ``tcgetpgrp`` of the terminal.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")
# Past this much output the command is killed: a flood is a failure, and reading it all would
# only slow the test down.
FLOOD_BYTES = 20 * 1024 * 1024


@dataclass
class TerminalRun:
    argv: Sequence[str]
    exit_code: int | None  # None: killed at the timeout or for flooding
    raw: bytes  # everything the terminal received, escape sequences included
    seconds: float  # from start to exit
    interrupted_at: float | None = None  # seconds after start that Ctrl-C was pressed
    flooded: bool = False
    timed_out: bool = False

    @property
    def text(self) -> str:
        """What a person reads: escape sequences removed, carriage-return redraws kept as lines."""
        return ANSI.sub(b"", self.raw).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")

    @property
    def seconds_after_interrupt(self) -> float | None:
        return None if self.interrupted_at is None else self.seconds - self.interrupted_at

    def describe(self) -> str:
        """For assertion messages: how it ended and the last of what it printed."""
        ending = ("killed at the timeout" if self.timed_out else "killed for flooding" if self.flooded
                  else f"exit {self.exit_code}")
        return (f"{' '.join(self.argv)}: {ending} after {self.seconds:.1f} s, {len(self.raw)} bytes; "
                f"last output:\n{self.text[-2500:]}")


def run_in_terminal(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    columns: int = 80,
    rows: int = 24,
    timeout: float = 60.0,
    interrupt_when: Callable[[str], bool] | None = None,
    interrupt_after: float | None = None,
) -> TerminalRun:
    """Run ``argv`` at a ``columns`` x ``rows`` pseudo-terminal with TERM=xterm-256color.

    Ctrl-C is pressed once, when ``interrupt_when`` first holds for the text printed so far, or
    ``interrupt_after`` seconds after the start, whichever comes first. The command is killed (and
    the run says so) after ``timeout`` seconds or ``FLOOD_BYTES`` of output."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {key: value for key, value in env.items() if key not in ("COLUMNS", "LINES")}
    full_env["TERM"] = "xterm-256color"

    def controlling_terminal() -> None:  # in the child, after setsid(): the slave becomes its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    started = time.monotonic()
    process = subprocess.Popen(list(argv), cwd=cwd, env=full_env, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True, preexec_fn=controlling_terminal, close_fds=True)
    os.close(slave)
    raw = bytearray()
    interrupted_at: float | None = None
    flooded = timed_out = False
    try:
        while True:
            elapsed = time.monotonic() - started
            if interrupted_at is None and (
                (interrupt_after is not None and elapsed >= interrupt_after)
                or (interrupt_when is not None and interrupt_when(ANSI.sub(b"", raw).decode("utf-8", "replace")))
            ):
                _press_ctrl_c(master, process.pid)
                interrupted_at = elapsed
            if elapsed > timeout:
                timed_out = True
                break
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                if process.poll() is not None and not _readable(master):
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the slave side is gone
                break
            if not data:
                break
            raw += data
            if len(raw) > FLOOD_BYTES:
                flooded = True
                break
    finally:
        if timed_out or flooded:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        exit_code = process.wait(timeout=30)
        os.close(master)
    return TerminalRun(argv=argv, exit_code=None if (timed_out or flooded) else _shell_style(exit_code), raw=bytes(raw),
                       seconds=time.monotonic() - started, interrupted_at=interrupted_at, flooded=flooded,
                       timed_out=timed_out)


def _press_ctrl_c(master: int, pid: int) -> None:
    """SIGINT to the terminal's foreground process group, as the line discipline sends it."""
    try:
        group = os.tcgetpgrp(master)
    except OSError:
        group = pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGINT)


def _readable(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


def _shell_style(code: int) -> int:
    """A process killed by signal N reads 128+N, as a shell shows it."""
    return 128 - code if code < 0 else code

