"""``run_lmi_build``: run ``python -m lmi_build ARGS`` as a separate process, as ``subprocess.run``
would, started by forking a process that has already imported the command-line layer
(``tests/cli_forkserver.py``, one per test worker). A CLI test then costs what lmi-build does, not
half a second of interpreter start-up.

A call runs as a fresh interpreter instead when the forked child could differ from one:
- it sets a variable that the interpreter or a preloaded library reads at start-up
  (``PYTHON*``, the locale, typer's and rich's switches) to another value than the server has;
- ``LMI_BUILD_TEST_FRESH=1`` is set, to run every call of a test session the slow way (a check that
  the fork server changes nothing: ``LMI_BUILD_TEST_FRESH=1 make unit``);
- it sets a file-size limit (that would cap the files the child's output is collected in too);
- the platform has no ``fork`` or no descriptor passing.
tests/test_cli_process.py shows both ways give the same exit status, output and files.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from tests.paths import REPO_ROOT

# Read by the interpreter at start-up, or by typer/rich/pydantic when the server imports them.
_STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG", "TYPER_", "_TYPER_", "PYDANTIC_")
_STARTUP_NAMES = ("TERMINAL_WIDTH", "GITHUB_ACTIONS", "FORCE_COLOR", "PY_COLORS", "NO_COLOR", "TERM")
# lmi_build.cli.main sets this one when it is unset (and so did the server): unset means this value.
# A test that runs main() in its own process leaves it set there, and must not make every later
# call of that process run fresh.
_SET_BY_MAIN = {"PYDANTIC_DISABLE_PLUGINS": "__all__"}


# Read when used, from the child's own environment (ray.init sets it in the process that calls it).
_READ_WHEN_USED = ("PYTHONBREAKPOINT",)


def _read_at_startup(name: str) -> bool:
    return (name.startswith(_STARTUP_PREFIXES) or name in _STARTUP_NAMES) and name not in _READ_WHEN_USED


# The environment the fork server starts with: this process's as the test modules are imported, not
# as some test has patched it when the first call comes.
_SESSION_ENVIRONMENT = dict(os.environ)


class _ForkServer:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.environment = _SESSION_ENVIRONMENT
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_forkserver", str(theirs.fileno())], cwd=REPO_ROOT,
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=self.environment)
        theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        ready = ours.recv(16)
        if ready != b"ready":
            _, problem = self.process.communicate(timeout=60)
            raise RuntimeError(f"the CLI fork server did not start: {problem.decode(errors='replace')[-2000:]}")

    def serves(self, env: Mapping[str, str]) -> bool:
        return not self.differences(env)

    def differences(self, env: Mapping[str, str]) -> list[str]:
        """The start-up variables ``env`` sets otherwise than the server's environment."""
        names = {name for name in (*env, *self.environment) if _read_at_startup(name)}
        return sorted(name for name in names
                      if env.get(name, _SET_BY_MAIN.get(name)) != self.environment.get(name, _SET_BY_MAIN.get(name)))

    def run(self, args: list[str], env: Mapping[str, str], cwd: Path, timeout: float,
            input: str | None) -> subprocess.CompletedProcess[str]:
        request = {"args": args, "env": dict(env), "cwd": str(cwd)}
        call, theirs = socket.socketpair()
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, \
                tempfile.TemporaryFile() as stderr:
            if input is not None:
                stdin.write(input.encode())
                stdin.seek(0)
            with self.lock:
                socket.send_fds(self.control, [b"call"], [theirs.fileno(), stdin.fileno(), stdout.fileno(),
                                                           stderr.fileno()])
            theirs.close()
            with call:
                call.sendall(json.dumps(request).encode())
                call.shutdown(socket.SHUT_WR)
                pid = int(_read_line(call))
                call.settimeout(timeout)
                try:
                    line = _read_line(call)
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    call.settimeout(None)
                    _read_line(call)
                    raise subprocess.TimeoutExpired(_command(args), timeout, _text(stdout), _text(stderr)) from None
                if not line:
                    raise RuntimeError("the CLI fork server stopped during a call")
                returncode = os.waitstatus_to_exitcode(int(line))
            return subprocess.CompletedProcess(_command(args), returncode, _text(stdout), _text(stderr))

    def close(self) -> None:
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _read_line(call: socket.socket) -> str:
    received = b""
    while not received.endswith(b"\n"):
        chunk = call.recv(64)
        if not chunk:
            break
        received += chunk
    return received.decode()


def _text(stream: IO[bytes]) -> str:
    # As subprocess.run(text=True) decodes: the locale's encoding, universal newlines.
    stream.seek(0)
    return stream.read().decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def _command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "lmi_build", *args]


_server: _ForkServer | None = None
_server_pid: int | None = None
_unavailable = not (hasattr(os, "fork") and hasattr(socket, "send_fds"))


def _fork_server() -> _ForkServer | None:
    global _server, _server_pid, _unavailable
    if _unavailable or os.environ.get("LMI_BUILD_TEST_FRESH") == "1":
        return None
    if _server is None or _server_pid != os.getpid():
        _server = _ForkServer()
        _server_pid = os.getpid()
        atexit.register(_server.close)
    return _server


def run_lmi_build(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                  timeout: float = 300, input: str | None = None,
                  file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, "-m", "lmi_build", *args], capture_output=True, text=True)``
    with the stdin ``input`` (empty when None), the working directory ``cwd`` (this process's when
    None), the environment ``env`` (this process's when None) and RLIMIT_FSIZE ``file_size_limit``.
    Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds, the process killed."""
    environment = dict(os.environ if env is None else env)
    directory = Path(cwd) if cwd is not None else Path.cwd()
    server = _fork_server()
    # A file-size limit would also cap the files the forked child's output is collected in: fresh.
    if server is not None and file_size_limit is None and server.serves(environment):
        return server.run(list(args), environment, directory, timeout, input)
    return _run_fresh(list(args), environment, directory, timeout, input, file_size_limit)


def _run_fresh(args: list[str], env: Mapping[str, str], cwd: Path, timeout: float, input: str | None,
               file_size_limit: int | None) -> subprocess.CompletedProcess[str]:
    import resource

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(_command(args), cwd=cwd, env=dict(env), input=input if input is not None else "",
                          capture_output=True, text=True, timeout=timeout, check=False,
                          preexec_fn=limit if file_size_limit is not None else None)
