"""Two ways a test runs the command line, both returning ``subprocess.CompletedProcess[str]``:

- ``run_lmi_build``: in this process, through the console script's own entry point
  (``lmi_build.cli.main``) with the call's argv, environment, working directory and stdin, and
  file descriptors 0, 1 and 2 pointing at temporary files (so what the command's child processes
  write is collected too). ``main()`` starts every command line from a reset output state; the
  libraries it imports stay imported for the next call, as in a long-lived worker. For behaviour.
- ``run_command_line``: a README line as a user types it (plain ``lmi-build`` lines in this process).
- ``run_lmi_build_process``: a separate ``python -m lmi_build`` (``subprocess.run``). For what only
  a process shows: signals, the exit of the interpreter, resource limits, what is imported at
  start-up, and the environment read when an interpreter or a library starts (locale,
  ``PYTHON*``, typer's and rich's switches, huggingface_hub's settings).
"""

from __future__ import annotations

import contextlib
import io
import locale
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import IO

import lmi_build
from lmi_build.cli import main


def run_lmi_build(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                  timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``lmi-build ARGS`` in this process, with the stdin ``input`` (empty when None), the working
    directory ``cwd`` (this process's when None) and the environment ``env`` (this process's when
    None), all restored afterwards. Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    written: dict[int, str] = {}
    with _environment(env), _directory(cwd), _arguments(list(args)), _standard_streams(input, written), \
            _signal_handlers(), _deadline(list(args), timeout):
        returncode = _exit_status(list(args))
    return subprocess.CompletedProcess(_command(list(args)), returncode, written[1], written[2])


def run_lmi_build_process(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                          timeout: float = 300, input: str | None = None,
                          file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m lmi_build ARGS`` as a separate process (``subprocess.run`` with the output
    captured as text), with RLIMIT_FSIZE ``file_size_limit`` when given."""
    import resource

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(_command(list(args)), cwd=cwd, env=None if env is None else dict(env),
                          input=input if input is not None else "", capture_output=True, text=True,
                          timeout=timeout, check=False, preexec_fn=limit if file_size_limit is not None else None)


def run_command_line(line: str, *, cwd: str | Path, env: Mapping[str, str],
                     timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A line as a user types it: a plain ``lmi-build ...`` (no shell syntax; a trailing ``# comment``
    is dropped) through ``run_lmi_build``, in this process, where torch, transformers and ModelOpt
    stay imported from one line to the next; any other line in bash."""
    words = shlex.split(line, comments=True)
    if words and words[0] == "lmi-build" and not set(line.split(" #")[0]) & set("&|;()<>$`"):
        return run_lmi_build(*words[1:], env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=dict(env), capture_output=True, text=True,
                          timeout=timeout, check=False)


def _command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "lmi_build", *args]


def _exit_status(args: list[str]) -> int:
    """The exit status the interpreter would give ``main(args)``: SystemExit's code, 1 after an
    uncaught exception (its traceback on stderr), -SIGINT after an uncaught KeyboardInterrupt."""
    try:
        main(args)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return (done.code or 0) & 0xFF
        print(done.code, file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        raise
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        return -signal.SIGINT
    except Exception:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    tempfile.tempdir = None  # read TMPDIR from the call's environment
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        tempfile.tempdir = None


@contextlib.contextmanager
def _arguments(args: list[str]) -> Iterator[None]:
    """sys.argv as ``python -m lmi_build ARGS`` has it (the program name in messages comes from it)."""
    saved = sys.argv
    sys.argv = [str(Path(lmi_build.__file__).parent / "__main__.py"), *args]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _directory(cwd: str | Path | None) -> Iterator[None]:
    saved = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _standard_streams(input: str | None, written: dict[int, str]) -> Iterator[None]:
    """Descriptors 0, 1, 2 and sys.stdin/stdout/stderr on temporary files for the block, as a
    process started with ``capture_output=True`` has them; what was written to 1 and 2 goes to
    ``written`` at the end."""
    encoding = locale.getpreferredencoding(False)
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        stdin.write((input or "").encode(encoding))
        stdin.seek(0)
        saved_streams = (sys.stdin, sys.stdout, sys.stderr)
        for stream in saved_streams:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        saved_fds = {fd: os.dup(fd) for fd in (0, 1, 2)}
        for fd, file in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(file.fileno(), fd)
        sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding)  # noqa: SIM115
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding=encoding)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), encoding=encoding,  # noqa: SIM115
                                      errors="backslashreplace", line_buffering=True)
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            for fd, original in saved_fds.items():
                os.dup2(original, fd)
                os.close(original)
            written.update({1: _text(stdout), 2: _text(stderr)})


@contextlib.contextmanager
def _signal_handlers() -> Iterator[None]:
    """main() handles SIGINT and SIGTERM as a command line does; the test process gets its own back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _deadline(args: list[str], timeout: float) -> Iterator[None]:
    def expired(signum: int, frame: FrameType | None) -> None:
        raise subprocess.TimeoutExpired(_command(args), timeout)

    saved = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved)


def _text(stream: IO[bytes]) -> str:
    # As subprocess.run(text=True) decodes: the locale's encoding, universal newlines.
    stream.seek(0)
    return stream.read().decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
