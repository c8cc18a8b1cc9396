"""Runners that execute steps now: on this host (``local``) or in a container image (``docker``).

Each streams the tool's output live, tees it into ``<work>/build-logs/<step>.log``, kills the
whole process group on timeout, and on failure removes the step's partial outputs and raises a
one-line ``StepError`` with the log tail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lmi_build.core.errors import StepError
from lmi_build.core.types import RunnerKind
from lmi_build.planning.plan import BuildPlan
from lmi_build.runners.process import stream_process
from lmi_build.runners.step import Paths, Step, StepResult, bind

LOG_DIR = "build-logs"
# How a container gets its accelerators: every GPU by default; a Neuron build passes its devices.
GPU_DEVICE_ARGS: tuple[str, ...] = ("--gpus", "all")


class Runner(Protocol):
    kind: RunnerKind

    def run(self, step: Step, paths: Paths, work_dir: Path, plan: BuildPlan | None) -> StepResult: ...


def gpu_count() -> int:
    """GPUs visible through nvidia-smi (0 when it is missing or fails)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def workers_for(plan: BuildPlan | None, gpus: int) -> int:
    """Parallel engine builds: the plan's world size, capped by the GPUs present (at least 1)."""
    world = plan.build.world_size if plan is not None and plan.build is not None else 1
    return max(1, min(world, gpus or 1))


def _check_inputs(step: Step, paths: Paths) -> None:
    for name in step.inputs:
        path = paths.get(name)
        if path is None:
            raise StepError(f"step '{step.name}' needs the {name} directory",
                            hint="pass --trtllm-examples DIR (a TensorRT-LLM checkout at the profile's tag)"
                            if name == "examples" else None)
        if not path.is_dir():
            raise StepError(f"step '{step.name}': input directory {path} does not exist")


def _remove_outputs(step: Step, paths: Paths) -> None:
    for name in step.outputs:
        path = paths.get(name)
        if path is not None and path.exists():
            shutil.rmtree(path, ignore_errors=True)


def _prepare_outputs(step: Step, paths: Paths) -> None:
    for name in step.outputs:
        path = paths.get(name)
        if path is None:
            continue
        if path.exists() and any(path.iterdir()):
            raise StepError(f"step '{step.name}': output directory {path} is not empty",
                            hint="remove it or choose another work directory")
        path.mkdir(parents=True, exist_ok=True)


@dataclass
class _ExecutingRunner:
    kind: RunnerKind = "local"
    gpus: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def _argv(self, step: Step, paths: Paths, plan: BuildPlan | None) -> list[str]:
        raise NotImplementedError

    def run(self, step: Step, paths: Paths, work_dir: Path, plan: BuildPlan | None) -> StepResult:
        _check_inputs(step, paths)
        _prepare_outputs(step, paths)
        log_path = work_dir / LOG_DIR / f"{step.name}.log"
        start = time.perf_counter()
        if step.in_process is not None:
            raise StepError(f"step '{step.name}' ({step.in_process}) runs in lmi-build itself, not through a runner",
                            hint="this is a bug in the target that handed it to a runner")
        try:
            stream_process(self._argv(step, paths, plan), name=step.name, log_path=log_path,
                           timeout_s=step.timeout_s, env={**step.env, **self.extra_env}, cwd=step.cwd)
        except BaseException:
            _remove_outputs(step, paths)
            raise
        return StepResult(name=step.name, seconds=round(time.perf_counter() - start, 3), where=self.kind,
                          log=log_path if log_path.exists() else None)


@dataclass
class LocalRunner(_ExecutingRunner):
    """The vendor tools on this host's PATH do the work."""

    kind: RunnerKind = "local"

    def _argv(self, step: Step, paths: Paths, plan: BuildPlan | None) -> list[str]:
        gpus = self.gpus if self.gpus is not None else gpu_count()
        values = {name: str(p) for name in paths.names() if (p := paths.get(name)) is not None}
        values["workers"] = str(workers_for(plan, gpus))
        return bind(step.argv, values)


@dataclass
class DockerRunner(_ExecutingRunner):
    """The profile's own container does the work; directories are bind-mounted."""

    kind: RunnerKind = "docker"
    image: str = ""
    docker: str = "docker"
    devices: tuple[str, ...] = GPU_DEVICE_ARGS

    def _argv(self, step: Step, paths: Paths, plan: BuildPlan | None) -> list[str]:
        gpus = self.gpus if self.gpus is not None else gpu_count()
        return docker_argv(step, paths, self.image, workers=workers_for(plan, gpus), docker=self.docker,
                           devices=self.devices)


def docker_argv(step: Step, paths: Paths, image: str, *, workers: int, docker: str = "docker",
                devices: tuple[str, ...] = GPU_DEVICE_ARGS) -> list[str]:
    argv = [docker, "run", "--rm", *devices, "--ipc=host", "--ulimit", "memlock=-1",
            "--user", f"{os.getuid()}:{os.getgid()}"]
    for name in paths.names():
        path = paths.get(name)
        if path is None or (name not in step.inputs and name not in step.outputs):
            continue
        read_only = name not in step.outputs
        argv += ["-v", f"{path.resolve()}:{paths.dir(name).mount}{':ro' if read_only else ''}"]
    for key, value in sorted(step.env.items()):
        argv += ["-e", f"{key}={value}"]
    values = {name: paths.dir(name).mount for name in paths.names()}
    values["workers"] = str(workers)
    argv += [image, *bind(step.argv, values)]
    return argv


def run_steps(steps: list[Step], runner: Runner, work_dir: Path, paths: Paths,
              plan: BuildPlan | None = None) -> list[StepResult]:
    """Run the steps in order; the first failure stops the build (its outputs already removed)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    return [runner.run(step, paths, work_dir, plan) for step in steps]
