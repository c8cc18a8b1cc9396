"""stdout or stderr that cannot be written (issue 42 item 9): closed (``>&-``), full (``/dev/full``),
or a pipe whose reader has gone (``| true``). The exit status is the command's result: no traceback,
no "Exception ignored in", a finished build, publish or pull is a success and keeps what it made
(README, "Exit status"). Real processes only: these are properties of a process's descriptors and
of its interpreter's exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import pytest

from tests.fixtures_s3 import S3Server
from tests.hostile import World, make_world

Stream = Literal["closed", "full", "reader-gone", "ok"]


@contextmanager
def _descriptor(kind: Stream) -> Iterator[int | None]:
    """The descriptor a child gets for the stream (None: closed in the child)."""
    if kind == "closed":
        yield None
    elif kind == "full":
        with open("/dev/full", "wb") as full:
            yield full.fileno()
    elif kind == "reader-gone":
        read, write = os.pipe()
        os.close(read)  # before the child starts: its first write gets EPIPE
        try:
            yield write
        finally:
            os.close(write)
    else:  # "ok": stdout to /dev/null, stderr captured
        with open(os.devnull, "wb") as sink:
            yield sink.fileno()


def run_with(world: World, *args: str, stdout: Stream, stderr: Stream = "ok", timeout: float = 120,
             env: dict[str, str] | None = None) -> tuple[int, str]:
    """``python -m lmi_build ARGS`` with the given streams: the exit status and, when stderr is
    "ok", what it wrote there."""
    with _descriptor(stdout) as out, _descriptor(stderr) as err:
        closed = [number for number, fd in ((1, out), (2, err)) if fd is None]

        def close_in_child() -> None:
            for number in closed:
                os.close(number)

        completed = subprocess.run(
            [sys.executable, "-m", "lmi_build", *args], cwd=world.cwd, env=world.environment(env),
            stdin=subprocess.DEVNULL, stdout=out if out is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE if stderr == "ok" else (err if err is not None else subprocess.DEVNULL),
            timeout=timeout, check=False, preexec_fn=close_in_child if closed else None)
    return completed.returncode, (completed.stderr or b"").decode("utf-8", "replace")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("streams"))


@pytest.fixture(scope="module")
def artifact(world: World) -> Path:
    """One real artifact for the module's cases (built with both streams writable)."""
    code, said = run_with(world, "hf", "--model", "./model", "--output", "artifact", "--no-cache", stdout="ok")
    assert code == 0, said
    return world.cwd / "artifact"


def _quiet_success(code: int, said: str, stdout: Stream) -> None:
    assert code == 0, said
    assert "Traceback" not in said and "Exception ignored" not in said, said
    if stdout == "full":  # output was lost for another reason than a reader leaving: one line says so
        assert said.strip().splitlines() == [line for line in said.strip().splitlines() if line.startswith("warning:")]
        assert "could not be written to stdout" in said
    else:  # a reader leaving is quiet: no warning or error (a transfer's final progress line may stand)
        assert not [line for line in said.splitlines() if line.startswith(("warning:", "error:"))], said


REPORTS = [(("plan", "hf", "--model", "./model"), "closed"),
           (("plan", "hf", "--model", "./model", "--json"), "reader-gone"), (("profiles", "list"), "full")]


@pytest.mark.parametrize(("args", "stdout"), REPORTS, ids=[f"{' '.join(a[:1] + a[-1:])}-{s}" for a, s in REPORTS])
def test_a_report_to_an_unwritable_stdout_is_no_traceback(world: World, args: tuple[str, ...], stdout: Stream) -> None:
    code, said = run_with(world, *args, stdout=stdout)
    _quiet_success(code, said, stdout)


def test_verify_and_inspect_report_to_an_unwritable_stdout(world: World, artifact: Path) -> None:
    for args, stdout in ((("verify", str(artifact)), "closed"), (("inspect", str(artifact), "--json"), "full")):
        code, said = run_with(world, *args, stdout=stdout)  # type: ignore[arg-type]
        _quiet_success(code, said, stdout)  # type: ignore[arg-type]


def test_a_finished_build_succeeds_with_both_streams_full(world: World) -> None:
    """The build's summary and progress fail to reach /dev/full; the artifact is built, verified and kept."""
    code, _ = run_with(world, "hf", "--model", "./model", "--output", "out", "--no-cache", stdout="full",
                       stderr="full")
    assert code == 0
    code, said = run_with(world, "verify", "out", stdout="ok")
    assert code == 0, said


@pytest.mark.s3
def test_a_finished_publish_and_pull_succeed_whatever_their_streams(world: World, artifact: Path, s3_env: S3Server,
                                                                    s3_bucket: str) -> None:
    """The publish is committed and the pull's destination complete: both are successes, whether
    their output went nowhere (stdout closed, stderr full) or to a reader that left (``| true``)."""
    world = World(world.root, env=s3_env.env(), secrets={})  # the server's own credentials, none else
    url = f"s3://{s3_bucket}/model"
    code, said = run_with(world, "publish", str(artifact), url, stdout="closed", stderr="full")
    assert code == 0
    code, said = run_with(world, "pull", url, "dest", stdout="reader-gone")
    _quiet_success(code, said, "reader-gone")
    for location in (url, "dest"):
        code, said = run_with(world, "verify", location, stdout="ok")
        assert code == 0, said
