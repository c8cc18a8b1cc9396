"""``matrix --executor local`` under faults (issue 42, items 6 and 9): a worker killed with
SIGKILL fails only its build (run again up to ``--max-retries``), the others go on and nothing is
left in ``LMI_BUILD_FLEET_WORK``; no multiprocessing resource tracker is started; a driver killed
by SIGKILL or SIGHUP takes its workers with it within seconds.

The builds are real hf builds of the session's demo model (no dtype change: no torch in the
workers), run with no shared cache (``run_matrix(cache=None)``), so no S3 is needed.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from lmi_build.fleet.job import BuildResult, Started
from lmi_build.fleet.report import MatrixProgress
from lmi_build.fleet.run import run_matrix
from lmi_build.reporting import events
from lmi_build.reporting.events import SCHEMA_PATH
from tests.cli_process import run_lmi_build
from tests.fixtures_ray import fleet_cache

pytestmark = pytest.mark.slow

TWO_BUILDS = """
[[build]]
target = "hf"
model = "demo:tiny-llama"
[build.matrix]
option = [["option.max_rolling_batch_size=4"], ["option.max_rolling_batch_size=8"]]
"""


@pytest.fixture
def fleet_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _session_cache: Path) -> Path:
    """The builds' cache (the session's demo model) and an empty fleet work directory."""
    work = tmp_path / "fleet-work"
    work.mkdir()
    monkeypatch.setenv("LMI_BUILD_CACHE", str(fleet_cache(tmp_path / "cache", _session_cache)))
    monkeypatch.setenv("LMI_BUILD_FLEET_WORK", str(work))
    (tmp_path / "builds.toml").write_text(TWO_BUILDS, encoding="utf-8")
    return work


def _children(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_worker_fails_only_its_build_after_its_retries(fleet_env: Path, tmp_path: Path) -> None:
    killed: list[int] = []
    helpers: list[str] = []
    first: list[str] = []

    def started(event: Started) -> None:
        helpers.extend(line for line in _children(os.getpid()) if "resource_tracker" in line)
        first.append(first[0] if first else event.name)
        if event.name == first[0] and event.pid is not None:  # each attempt of one build is killed
            killed.append(event.pid)
            os.kill(event.pid, signal.SIGKILL)

    results: list[BuildResult] = []
    progress = run_matrix(tmp_path / "builds.toml", cache=None, max_retries=1, on_started=started,
                          on_result=results.append)
    by_name = {result.name: result for result in results}
    assert len(killed) == 2, "the killed build ran again once (--max-retries 1)"
    assert by_name[first[0]].status == "failed" and "killed by SIGKILL" in (by_name[first[0]].error or "")
    assert [r.status for name, r in by_name.items() if name != first[0]] == ["built"], "the other build went on"
    assert progress.starts[first[0]] == 2
    assert helpers == [], "no multiprocessing resource tracker"
    assert list(fleet_env.iterdir()) == [], "a killed worker's lock and work directory are removed"


# It dies as soon as its interpreter runs a line after the SIGTERM the kernel sends it (ms on an idle
# host; a C call in progress, such as loading torch's library on a host loaded 6x over, delays it by
# seconds). A pool worker of before stayed 24 s and more.
WORKER_DIES_WITHIN_S = 5.0
DRIVER = """
import sys
from pathlib import Path
from lmi_build.fleet.run import run_matrix
run_matrix(Path(sys.argv[1]), cache=None, on_started=lambda event: print(event.pid, flush=True))
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
def test_workers_die_with_their_driver(fleet_env: Path, tmp_path: Path, sig: int) -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "builds.toml")],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert driver.stdout is not None
    worker = int(driver.stdout.readline())
    os.kill(driver.pid, sig)
    driver.wait(10)
    killed = time.monotonic()
    while _alive(worker) and time.monotonic() < killed + WORKER_DIES_WITHIN_S:
        time.sleep(0.05)
    assert not _alive(worker), f"the worker outlived its driver's {signal.Signals(sig).name} by {WORKER_DIES_WITHIN_S} s"
    print(f"the worker died {time.monotonic() - killed:.2f} s after its driver")
    while list(fleet_env.iterdir()) and time.monotonic() < killed + WORKER_DIES_WITHIN_S + 3:
        time.sleep(0.1)
    assert list(fleet_env.iterdir()) == [], json.dumps([p.name for p in fleet_env.iterdir()])


ENGINE_BUILDS_WITHOUT_TENSORRT_LLM = """
[defaults]
target = "trtllm"
model = "demo:tiny-gpt2"
profile = "lmi-0.33.0-trtllm-0.21.0"
tp = 1
max_input_len = 64
max_output_len = 32

[[build]]
name = "stopped"

[[build]]
name = "bundle"
runner = "script"
tp = 2  # another artifact: the runner is no part of the cache key
"""


def test_engine_builds_without_tensorrt_llm_keep_what_the_gpu_stage_needs(
        fleet_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No TensorRT-LLM here: the build stops as a single build's exit 3 does, and its output (plan.json,
    the checkpoint when it is converted here) is kept with the command that finishes it; a
    ``runner = "script"`` build writes its bundle. Both were "incomplete", with nothing kept."""
    keep = [p for p in os.environ["PATH"].split(os.pathsep)
            if not (Path(p) / "trtllm-build").exists() and not (Path(p) / "nvidia-smi").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(keep))
    matrix = tmp_path / "engines.toml"
    matrix.write_text(ENGINE_BUILDS_WITHOUT_TENSORRT_LLM, encoding="utf-8")
    progress = run_matrix(matrix, cache=None)
    builds = {build["name"]: build for build in progress.to_json()["builds"]}
    stopped, bundle = builds["stopped"], builds["bundle"]
    assert stopped["status"] == "checkpoint" and bundle["status"] == "script"
    assert (Path(stopped["kept"]) / "plan.json").is_file()
    assert f"--plan {stopped['kept']}/plan.json" in stopped["next_command"]
    assert (Path(bundle["kept"]) / "build-engines.sh").is_file() and "./build-engines.sh" in bundle["next_command"]
    assert progress.stopped_only and not progress.succeeded  # the matrix exits 3, as the single build
    kept = {Path(stopped["kept"]).parent, Path(bundle["kept"]).parent}
    assert set(fleet_env.iterdir()) == kept, "only the kept outputs stay"
    for directory in kept:
        assert [p.name for p in directory.iterdir()] == ["artifact"], "no lock or work directory beside them"


def _shown(renderable: object) -> str:
    console = Console(width=120, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _events(path: Path) -> list[dict[str, Any]]:
    """The events written to ``path``, each checked against the committed schema."""
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    found = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for event in found:
        validator.validate(event)
        datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    return found


def test_a_matrix_without_a_cache_uses_this_hosts_and_shows_each_step(fleet_env: Path, tmp_path: Path) -> None:
    """Issue 40 item 4: without --cache a matrix runs with this host's local build cache (a rerun
    reuses it); issue 42 item 4: the live view shows each running build's step and time left; the
    builds' events (their workers') reach the driver's --events file with each build's name."""
    shown: list[str] = []

    def update(progress: MatrixProgress) -> None:
        if progress.steps:
            shown.append(_shown(progress.render()))

    first_events = tmp_path / "first.jsonl"
    events.open_sink(str(first_events))
    try:
        progress = run_matrix(tmp_path / "builds.toml", cache=None, local_cache=True, on_update=update)
    finally:
        events.close_sink(exit_code=0, outcome="ok")
    builds = progress.to_json()["builds"]
    assert {build["status"] for build in builds} == {"built"}
    cache = Path(os.environ["LMI_BUILD_CACHE"]) / "artifacts"
    assert all(Path(build["artifact_url"]).parent == cache for build in builds), builds
    assert any("package" in text and "?" in text for text in shown), shown  # the step, no estimate for it
    first = _events(first_events)
    steps = {(event["build"], event["step"]) for event in first if event["type"] == "step_end"}
    assert {step for _, step in steps} >= {"fetch", "package"} and len({name for name, _ in steps}) == 2
    assert [event["type"] for event in first].count("plan") == 2 and first[-1]["type"] == "result"

    # The CLI, without --cache, on one of those builds (one worker: each costs a second or two).
    one = tmp_path / "one.toml"
    one.write_text(TWO_BUILDS.replace(', ["option.max_rolling_batch_size=8"]', ""), encoding="utf-8")
    again_events = tmp_path / "again.jsonl"
    rerun = run_lmi_build("matrix", str(one), "--events", str(again_events))
    assert rerun.returncode == 0, rerun.stderr
    assert "this host's local build cache" in rerun.stderr
    again = _events(again_events)
    assert [event["cache"] for event in again if event["type"] == "cache_hit"] == ["local"]
    assert {event["status"] for event in again if event["type"] == "build_result"} == {"cached"}
    assert again[-1]["type"] == "result" and again[-1]["exit_code"] == 0
