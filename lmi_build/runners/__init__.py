"""Where a target's steps run: on this host (``local``), in the profile's container (``docker``),
or nowhere yet (``script``: a self-contained shell script for a host without lmi-build).

Shared by every target: a target describes its steps (``Step``) and directories (``Paths``);
runners bind, execute or write them.
"""

from __future__ import annotations

from lmi_build.core.errors import LmiBuildError
from lmi_build.runners.executing import (
    GPU_DEVICE_ARGS,
    LOG_DIR,
    DockerRunner,
    LocalRunner,
    Runner,
    RunnerKind,
    docker_argv,
    gpu_count,
    run_steps,
    workers_for,
)
from lmi_build.runners.process import stream_process
from lmi_build.runners.script import ScriptRunner
from lmi_build.runners.step import Dir, Paths, Step, StepResult, bind


def make_runner(kind: RunnerKind, *, image: str | None = None, gpus: int | None = None,
                env: dict[str, str] | None = None, docker: str = "docker",
                devices: tuple[str, ...] = GPU_DEVICE_ARGS) -> Runner:
    """A runner of ``kind``; ``image`` is the container the docker runner (and scripts) use,
    ``devices`` the docker arguments that give it the accelerators (all GPUs by default)."""
    if kind == "local":
        return LocalRunner(gpus=gpus, extra_env=dict(env or {}))
    if kind == "docker":
        return DockerRunner(gpus=gpus, extra_env=dict(env or {}), image=image or "", docker=docker, devices=devices)
    if kind == "script":
        return ScriptRunner(image=image, devices=devices)
    raise LmiBuildError(f"unknown runner '{kind}'", hint="use local, docker or script")


__all__ = ["GPU_DEVICE_ARGS", "LOG_DIR", "Dir", "DockerRunner", "LocalRunner", "Paths", "Runner", "RunnerKind", "ScriptRunner",
           "Step", "StepResult", "bind", "docker_argv", "gpu_count", "make_runner", "run_steps", "stream_process",
           "workers_for"]
