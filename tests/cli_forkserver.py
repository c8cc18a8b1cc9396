"""The fork server behind ``tests/cli_process.py``: a Python process that has imported lmi-build's
command-line layer once and forks a fresh ``python -m lmi_build`` for each call.

Why it exists: a CLI test pays about 0.5 s of interpreter start-up and imports (typer, rich,
pydantic, the command modules) before lmi-build does anything, and the suite makes well over a
thousand such calls. A forked child starts with those modules loaded and is otherwise a separate
process: its own pid, environment, working directory, file descriptors, resource limits, signal
handlers and exit status, and every library it loads after the fork (torch, huggingface_hub, boto3,
ray) it loads itself, reading the environment the test gave it.

Why not ``multiprocessing``'s forkserver: its children re-import the parent's ``__main__``, close
stdin, take no file descriptors for their standard streams, and exit without running ``atexit``
handlers; a CLI run needs each of those to behave as a fresh interpreter would.

Protocol (one SOCK_SEQPACKET socket pair with the test process, Unix-only like the rest of the
suite): a call is one message carrying four descriptors: a stream socket for this call, and the
child's stdin, stdout and stderr. On the call's socket the test writes the request as JSON and
closes its write side; the server answers ``<pid>\\n`` when the child runs and ``<wait status>\\n``
when it has ended.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, NoReturn

# Loaded before any fork: lmi-build's modules and the libraries of its command-line layer. Nothing
# that reads the environment when it is imported (huggingface_hub, boto3, transformers, torch) may
# be among them: a child would see the server's environment, not its own. The variables the
# preloaded libraries do read at import (typer's and rich's switches) are the ones a call may not
# change without running fresh (tests/cli_process.py).
NOT_PRELOADED = ("torch", "transformers", "huggingface_hub", "boto3", "botocore", "s3transfer", "ray",
                 "modelopt", "safetensors", "numpy")
PRELOADED_LIBRARIES = ("typer", "typer.rich_utils", "rich.console", "rich.progress", "rich.table", "rich.markup",
                       "pydantic", "concurrent.futures", "pickle", "queue", "email.utils")
# Third-party packages a preloaded lmi-build module may import at module level.
_LIGHT_PACKAGES = {"lmi_build", "typer", "click", "rich", "pydantic", "pydantic_core", "annotated_types",
                   "typing_extensions", "typing_inspection", "tomli", "shellingham", "packaging"}


def _light_modules() -> list[str]:
    """The modules of lmi_build whose module-level imports, followed through lmi_build, reach only
    the standard library and ``_LIGHT_PACKAGES``: read from their source, nothing imported."""
    import ast

    import lmi_build

    root = Path(lmi_build.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py":  # runs the command line when imported
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.parse(path.read_text(), str(path)).body:  # module level only: lazy imports stay lazy
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        imports[name] = found

    def light(name: str, seen: set[str]) -> bool:
        if name in seen:
            return True
        seen.add(name)
        for used in imports[name]:
            top = used.split(".")[0]
            if used in imports:
                if not light(used, seen):
                    return False
            elif top not in sys.stdlib_module_names and top not in _LIGHT_PACKAGES:
                return False
        return True

    return [name for name in imports if light(name, set())]


def _preload() -> None:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as lmi_build.cli.main does
    for name in (*PRELOADED_LIBRARIES, *_light_modules()):
        importlib.import_module(name)
    from lmi_build.cli import build_app

    build_app()  # imports every command module
    loaded = sorted(name for name in NOT_PRELOADED if name in sys.modules)
    if loaded:
        raise SystemExit(f"cli_forkserver: preloading imported {loaded}; a child would not read its own environment")


def _child(request: dict[str, Any], stdin: int, stdout: int, stderr: int) -> NoReturn:
    """Become ``python -m lmi_build ARGS`` as subprocess.run would have started it."""
    for target, source in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(source, target)
    for fd in {stdin, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR again, from this child's environment
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's path first, as `python -m` does
    status = 0
    try:
        runpy.run_module("lmi_build", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        status = _exit_status(done.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        status = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    _finish_like_an_interpreter(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish_like_an_interpreter(status: int) -> NoReturn:
    # The order of Py_FinalizeEx: wait for non-daemon threads, run atexit handlers, flush the streams.
    threading._shutdown()  # type: ignore[attr-defined]  # what multiprocessing's children call too
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if status < 0:  # died of a signal, as an uncaught KeyboardInterrupt does
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def _monitor(call: socket.socket, stdin: int, stdout: int, stderr: int) -> NoReturn:
    """Start the child, tell the test its pid, wait for it, tell the test how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it to reap monitors
    received = b""
    while chunk := call.recv(1 << 16):
        received += chunk
    request = json.loads(received)
    pid = os.fork()
    if pid == 0:
        call.close()
        _child(request, stdin, stdout, stderr)
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    call.sendall(f"{pid}\n".encode())
    _, wait_status = os.waitpid(pid, 0)
    call.sendall(f"{wait_status}\n".encode())
    os._exit(0)


def serve(control: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    while True:
        message, fds, _, _ = socket.recv_fds(control, 16, 4)
        if not message:  # the test process closed its end: the session is over
            return
        call = socket.socket(fileno=fds[0])
        if os.fork() == 0:
            control.close()
            _monitor(call, *fds[1:])
        call.close()
        for fd in fds[1:]:
            os.close(fd)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    _preload()
    control.sendall(b"ready")
    serve(control)


if __name__ == "__main__":
    main()
