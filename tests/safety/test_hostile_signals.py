"""Real signals at a real build: SIGTERM (a CI cancel, ``timeout``) cleans up as Ctrl-C does.

The engine compiler is the STAND-IN ``tests/standins/trtllm-build`` (it builds no engine); the
checkpoint conversion before it is real (torch on CPU), hence ``slow``.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.hostile import World, make_world, terminate, wait_for_line
from tests.paths import STANDINS_DIR

STANDINS = STANDINS_DIR
PROFILE = "lmi-0.33.0-trtllm-0.21.0"
pytestmark = pytest.mark.slow
# The test model has 512 positions.
SHORT = ("--max-input-len", "256", "--max-output-len", "128")


def _no_gpu_path() -> str:
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "trtllm-build").exists() and not (Path(p) / "nvidia-smi").exists())


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: the demo model (real weights) is generated once, and the builds (one
    model, profile and lengths) convert its checkpoint once, the later ones restoring it from the
    checkpoint cache: what is tested is the engine step's process group, not the conversion."""
    return tmp_path_factory.mktemp("signals-cache")


@pytest.fixture
def world(tmp_path: Path, demo_cache: Path) -> World:
    made = make_world(tmp_path)
    made.env = {"PATH": f"{STANDINS}{os.pathsep}{_no_gpu_path()}", "STANDIN_TRTLLM_VERSION": "0.21.0rc1",
                "LMI_BUILD_CACHE": str(demo_cache)}
    return made


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_kills_the_vendor_tool_and_removes_the_work(world: World, sig: int, code: int) -> None:
    before = world.snapshot()
    process = world.start("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", "out", *SHORT,
                          env={"STANDIN_MODE": "hang", "PYTHONUNBUFFERED": "1"})
    assert process.stderr is not None
    banner = wait_for_line(process.stderr, "hanging")
    tool_pid = int(re.search(r"pid (\d+)", banner).group(1))  # type: ignore[union-attr]
    result = terminate(process, sig)
    world.expect(result, code=code, before=before)
    assert not _alive(tool_pid), "the vendor tool's process group was killed"
    assert not (world.cwd / "out").exists()


def test_failed_step_log_is_where_the_message_says(world: World) -> None:
    before = world.snapshot()
    result = world.run("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", "out", *SHORT,
                       env={"STANDIN_MODE": "fail"})
    world.expect(result, code=1, before=before, allowed=("work/out.build-logs",))
    match = re.search(r"full log: (\S+\.log)", result.error_lines[0])
    assert match is not None, result.error_lines[0]
    log = Path(match.group(1))
    assert log.is_file(), f"the hint points at a deleted log: {log}"
    assert "simulated failure" in log.read_text()


def test_vendor_tool_gets_no_credentials_and_its_output_is_redacted(world: World, tmp_path: Path) -> None:
    """A tool that prints its environment: the secrets are neither in its environment nor in any output."""
    spy = tmp_path / "spy-bin"
    spy.mkdir()
    real = STANDINS / "trtllm-build"
    (spy / "trtllm-build").write_text(
        "#!/bin/sh\n"
        "# STAND-IN wrapper (tests only): prints its environment, then runs the stand-in compiler\n"
        f"env > {tmp_path / 'tool-env.txt'}\n"
        f"echo \"leaked? $LEAK_ME\"\n"
        f"exec {real} \"$@\"\n")
    (spy / "trtllm-build").chmod(0o755)
    os.symlink(STANDINS / "nvidia-smi", spy / "nvidia-smi")
    leak = "a-custom-api-key-value-0123456789"
    world.secrets["MY_API_KEY"] = leak
    before = world.snapshot()
    result = world.run("trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--output", "out", *SHORT,
                       env={"PATH": f"{spy}{os.pathsep}{world.env['PATH']}", "MY_API_KEY": leak,
                            "LEAK_ME": world.secrets["HF_TOKEN"]})
    world.expect(result, code=0, before=before, allowed=("work/out", "spy-bin", "tool-env.txt"))
    tool_env = (tmp_path / "tool-env.txt").read_text()
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MY_API_KEY"):
        assert f"{name}=" not in tool_env, f"{name} was given to the vendor tool"
    logs = "".join(p.read_text() for p in (world.cwd / "out").rglob("*.log"))
    assert "leaked? ***" in logs and world.secrets["HF_TOKEN"] not in logs
    assert json.loads((world.cwd / "out" / "lmi-build.json").read_text())["toolchain"]["found"]["stand_in"] == "true"
