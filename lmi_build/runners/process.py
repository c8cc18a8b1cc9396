"""Run one vendor tool: its own process group, every output line streamed live and logged.

The tool's group dies with lmi-build, even a SIGKILLed one (which runs no cleanup): the tool gets
``PR_SET_PDEATHSIG`` (Linux), and a reaper process outside both groups kills the tool's whole group
(the subprocesses a compiler starts too) when lmi-build's end of a pipe closes without a word.

The tool gets this process's environment without its credentials (HF token, AWS keys, any
``*_TOKEN``/``*SECRET*`` variable): a compiler needs none, and a tool that prints its environment
or crashes with it in a dump must not leak them. A step that needs one passes it in ``env``.
Every streamed and logged line is redacted all the same.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from collections import deque
from pathlib import Path

from lmi_build.core.errors import StepError
from lmi_build.core.redaction import environment_secrets, is_secret_env_name, redact_text
from lmi_build.reporting.output import current
from lmi_build.runners.reaping import die_with_parent, group_reaper

TAIL_LINES = 5


def stream_process(argv: list[str], *, name: str, log_path: Path, timeout_s: float,
                   env: dict[str, str] | None = None, cwd: str | None = None) -> None:
    """Run ``argv`` in its own process group; print and log each line as it comes.

    Raises ``StepError`` (with the last lines) on a nonzero exit or a timeout.
    """

    log_path.parent.mkdir(parents=True, exist_ok=True)
    inherited = {name: value for name, value in os.environ.items() if not is_secret_env_name(name)}
    full_env = {**inherited, **(env or {}), "PYTHONUNBUFFERED": "1"}
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                                   cwd=cwd, start_new_session=True, text=True, bufsize=1, errors="replace",
                                   preexec_fn=die_with_parent())
    except FileNotFoundError:
        raise StepError(f"step '{name}': {argv[0]} not found", hint="install it or use another runner") from None
    with group_reaper(process.pid):
        _stream(process, argv, name=name, log_path=log_path, timeout_s=timeout_s)


def _stream(process: subprocess.Popen[str], argv: list[str], *, name: str, log_path: Path, timeout_s: float) -> None:
    out = current()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    secrets = environment_secrets()
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, _kill)
    timer.start()
    try:
        with open(log_path, "w", encoding="utf-8") as log, out.working(f"{name} running") as show_last:
            log.write(redact_text("$ " + shlex.join(argv), secrets) + "\n")
            for raw in process.stdout or ():
                line = redact_text(raw.rstrip("\n"), secrets)
                log.write(line + "\n")
                log.flush()
                tail.append(line)
                out.log_line(f"[{name}]", line)
                show_last(line)
        code = process.wait()
    except KeyboardInterrupt:
        _kill()
        process.wait()
        raise
    finally:
        timer.cancel()
    last = " | ".join(tail) if tail else "no output"
    if timed_out.is_set():
        error = StepError(f"step '{name}' timed out after {timeout_s:g}s and was killed; last lines: {last}",
                          hint=f"full log: {log_path}")
    elif code != 0:
        error = StepError(f"step '{name}' failed (exit {code}); last lines: {last}", hint=f"full log: {log_path}")
    else:
        return
    error.log = log_path  # a matrix worker keeps it past its work directory (fleet/job.py)
    raise error
