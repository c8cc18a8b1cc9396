"""The harness of the hostile-input tests: run the real CLI in a sandbox and check every promise.

Each case runs the real CLI (in the test process; as a separate ``python -m lmi_build`` where a
process is the point: signals, resource limits) inside a ``World``: a directory holding the current
directory, a real model and everything else the case sets up. ``World.expect`` then asserts what
the README promises for bad input and faults:

- the exit status,
- exactly one ``error:`` line (when it fails), never a traceback,
- no secret of the environment (HF token, AWS keys, URL passwords) in stdout or stderr,
- nothing outside the allowed paths created, changed or deleted (nothing lost, nothing written outside).
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.cli_process import run_lmi_build, run_lmi_build_process
from tests.fixtures_artifact import write_source_model

# Credentials every case runs with: none of them may appear in any output.
SECRETS = {
    "HF_TOKEN": "hf_hostileToken0123456789abcdefXYZ",
    "AWS_SECRET_ACCESS_KEY": "hostileSecretKey0123456789abcdEFGHijkl",
    "AWS_SESSION_TOKEN": "hostileSessionToken0123456789abcdefgh",
}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


# Files up to this size are hashed whole; a bigger one (a case's sparse 3 GiB file) by its size,
# modification time and its first and last MiB: hashing it whole took 19 s per snapshot.
_WHOLE_HASH_BYTES = 64 * 1024 * 1024
_EDGE_BYTES = 1024 * 1024


def _fingerprint(path: Path) -> str:
    info = path.stat()
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        if info.st_size <= _WHOLE_HASH_BYTES:
            for chunk in iter(lambda: stream.read(_EDGE_BYTES), b""):
                digest.update(chunk)
            return f"{info.st_size}:{digest.hexdigest()[:16]}"
        digest.update(stream.read(_EDGE_BYTES))
        stream.seek(info.st_size - _EDGE_BYTES)
        digest.update(stream.read(_EDGE_BYTES))
    return f"{info.st_size}:{info.st_mtime_ns}:{digest.hexdigest()[:16]}"


@dataclass
class World:
    """A sandbox: ``root`` holds ``cwd`` (where the CLI runs), ``model`` (a real tiny model) and
    the cache; ``snapshot()`` records every path under ``root`` to prove nothing else changed."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=lambda: dict(SECRETS))

    @property
    def cwd(self) -> Path:
        return self.root / "work"

    @property
    def model(self) -> Path:
        return self.cwd / "model"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def home(self) -> Path:
        """HOME of every case: a sandbox, so that a case about the home directory can never touch
        the real one, even against code without the output guard."""
        return self.root / "home"

    def setup(self) -> World:
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.cache.mkdir(exist_ok=True)
        self.home.mkdir(exist_ok=True)
        (self.home / "keep.txt").write_text("the user's home\n")
        write_source_model(self.model, remote_code=False)
        (self.model / "pytorch_model.bin").unlink()
        (self.root / "outside.txt").write_text("keep me\n")
        return self

    def environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, **self.secrets, "LMI_BUILD_CACHE": str(self.cache), "COLUMNS": "200",
               "HOME": str(self.home)}
        for name in ("LMI_BUILD_DEBUG",):
            env.pop(name, None)
        return {**env, **self.env, **(extra or {})}

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "lmi_build", *args], cwd=self.cwd, text=True,
                                env=self.environment(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 180,
            file_size_limit: int | None = None) -> Result:
        """``file_size_limit``: RLIMIT_FSIZE of the process, a full disk where no tmpfs can be mounted
        (a write past it fails with EFBIG: Python ignores SIGXFSZ)."""
        # HOSTILE_TIMEOUT caps every case (the before/after count runs these against older code that hangs).
        timeout = min(timeout, float(os.environ.get("HOSTILE_TIMEOUT", timeout)))
        if file_size_limit is not None:  # a limit of the process: it would cap this one's files too
            completed = run_lmi_build_process(*args, cwd=self.cwd, env=self.environment(env), timeout=timeout,
                                              file_size_limit=file_size_limit)
        else:
            completed = run_lmi_build(*args, cwd=self.cwd, env=self.environment(env), timeout=timeout)
        return Result(completed.returncode, completed.stdout, completed.stderr)

    def snapshot(self) -> dict[str, str]:
        """Every path under ``root``: its kind and, for files, size and a content hash."""
        found: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                rel = path.relative_to(self.root).as_posix()
                if path.is_symlink():
                    found[rel] = "link:" + os.readlink(path)
                elif path.is_dir():
                    found[rel] = "dir"
                elif not path.is_file():  # a FIFO or socket a case planted: never opened (it would block)
                    found[rel] = f"special:{stat.S_IFMT(path.lstat().st_mode):o}"
                else:
                    found[rel] = _fingerprint(path)
        return found

    def expect(self, result: Result, *, code: int, before: dict[str, str], allowed: tuple[str, ...] = (),
               says: str | None = None) -> None:
        """Assert the promises (see the module docstring). ``allowed``: relative paths under
        ``root`` (and everything below them) the case may create or change; the cache always may."""
        output = result.stdout + result.stderr
        assert result.returncode == code, f"exit {result.returncode}, expected {code}: {output[-2000:]}"
        assert "Traceback" not in output, output[-3000:]
        if code != 0:
            assert len(result.error_lines) == 1, f"expected one error line: {result.stderr[-2000:]}"
            if says is not None:
                assert says in result.error_lines[0], result.error_lines[0]
        for name, secret in self.secrets.items():
            assert secret not in output, f"{name} leaked: {output[-2000:]}"
        after = self.snapshot()
        free = ("cache", *allowed)

        def watched(rel: str) -> bool:
            return not any(rel == a or rel.startswith(a + "/") for a in free)

        lost = sorted(rel for rel in before if watched(rel) and before[rel] != after.get(rel))
        added = sorted(rel for rel in after if watched(rel) and rel not in before)
        assert not lost, f"changed or lost: {lost[:10]}"
        assert not added, f"written outside the output: {added[:10]}"


def make_world(root: Path) -> World:
    return World(root=root).setup()


def wait_for_line(stream: IO[str] | None, needle: str, timeout: float = 120) -> str:
    """Read ``stream`` (a process's stderr, where progress goes) until a line holding ``needle``."""
    assert stream is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"never saw {needle!r}: {''.join(seen)[-2000:]}")


def terminate(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> Result:
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=60)
    return Result(process.returncode, stdout, stderr)
