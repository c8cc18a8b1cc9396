"""A SIGKILLed build (no cleanup runs) takes its vendor compiler with it, and a rerun never deletes a
work directory a live process still works in (issue 32 item 9).

The compiler is the STAND-IN ``tests/standins/neuron-python`` in its ``hang`` mode: it compiles
nothing, starts a subprocess of its own (as neuronx-cc does) and, with ``STANDIN_ESCAPE=1``, a third
process that leaves the group (setsid), all working in lmi-build's work directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.fixtures_neuronx import STANDIN_PYTHON, write_neuron_model
from tests.hostile import World, make_world, wait_for_line

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="Linux: /proc and PR_SET_PDEATHSIG")
BUILD = ("neuronx", "--model", "../llama", "--tp", "2", "--n-positions", "2048", "--no-cache", "--output", "out")


@pytest.fixture
def world(tmp_path: Path) -> World:
    made = make_world(tmp_path)
    write_neuron_model(made.root / "llama")
    made.env = {"LMI_BUILD_NEURON_PYTHON": str(STANDIN_PYTHON), "STANDIN_MODE": "hang", "PYTHONUNBUFFERED": "1"}
    return made


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait_dead(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _sigkill_while_compiling(world: World, env: dict[str, str] | None = None) -> tuple[int, int, int]:
    """Start the build, wait for the compiler, SIGKILL lmi-build; returns (compiler, its child, escaped)."""
    process = world.start(*BUILD, env=env)
    banner = wait_for_line(process.stderr, "hanging (kill test)")
    found = re.search(r"pid (\d+) child (\d+) escaped (\d+)", banner)
    assert found is not None, banner
    process.kill()
    process.communicate(timeout=30)
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


def test_a_sigkilled_build_takes_its_compiler_and_its_subprocesses_with_it(world: World) -> None:
    compiler, child = _sigkill_while_compiling(world)[:2]
    try:
        survivors = _wait_dead([compiler, child], seconds=5)
        assert not survivors, f"still running after lmi-build was SIGKILLed: {survivors}"
    finally:
        for pid in (compiler, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_rerun_never_deletes_a_work_directory_a_live_process_works_in(world: World) -> None:
    compiler, child, escaped = _sigkill_while_compiling(world, env={"STANDIN_ESCAPE": "1"})
    try:
        assert not _wait_dead([compiler, child], seconds=5)
        assert _alive(escaped), "the escaped process left the group: nothing of lmi-build's reaches it"
        work = [path for path in world.cwd.iterdir() if path.name.startswith(".out.work-")]
        assert len(work) == 1, work
        rerun = world.run(*BUILD, env={"STANDIN_MODE": "ok"})
        assert rerun.returncode == 0, rerun.stderr
        assert work[0].is_dir(), "the rerun deleted the directory the escaped process works in"
        assert f"kept {work[0].name}" in rerun.stderr and f"pid {escaped}" in rerun.stderr, rerun.stderr
        os.kill(escaped, signal.SIGKILL)
        assert not _wait_dead([escaped], seconds=5)
        again = world.run(*BUILD, "--overwrite", env={"STANDIN_MODE": "ok"})
        assert again.returncode == 0, again.stderr
        assert not work[0].exists(), "once nobody works in it, the next build removes it"
    finally:
        for pid in (compiler, child, escaped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
