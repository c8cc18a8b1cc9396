"""Whether TensorRT-LLM engines can be built here, and with which runner."""

from __future__ import annotations

import shutil
import subprocess

from lmi_build.runners import RunnerKind, Step, gpu_count
from lmi_build.targets.trtllm.profiles import ContainerProfile


def toolchain_available(runner_kind: RunnerKind, profile: ContainerProfile,
                        steps: list[Step] | None = None) -> tuple[bool, str]:
    """Whether the runner can build engines here, and if not, why (one line)."""
    if runner_kind == "script":
        return True, "script runner: nothing runs here"
    problems: list[str] = []
    if runner_kind == "local":
        programs = {"trtllm-build"} if profile.workflow != "legacy" else {"python3"}
        for step in steps or []:
            if step.in_process is None and step.where == "container":
                programs.add(step.argv[0])
        problems += [f"{p} not found on PATH" for p in sorted(programs) if shutil.which(p) is None]
    else:
        if shutil.which("docker") is None:
            problems.append("docker CLI not found on PATH")
        else:
            try:
                info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                      text=True, timeout=30, check=False)
                if info.returncode != 0:
                    problems.append("docker engine not reachable (docker info failed)")
            except (OSError, subprocess.TimeoutExpired):
                problems.append("docker engine not reachable (docker info timed out)")
    if shutil.which("nvidia-smi") is None:
        problems.append("no GPU (nvidia-smi missing)")
    elif gpu_count() == 0:
        problems.append("no GPU (nvidia-smi lists none)")
    return (not problems, "; ".join(problems) if problems else "ok")
