"""Where the engine steps run: on this host (``local``), in the profile's container (``docker``),
or nowhere yet (``script``: a self-contained shell script for a GPU host without lmi-build).

Execution streams each tool's output live, line by line, with the step name as prefix, tees it into
``<work>/build-logs/<step>.log``, kills the whole process group on timeout, and on failure removes
the step's partial outputs and raises a one-line ``StepError`` with the log tail.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from lmi_build.errors import LmiBuildError, MissingDependency, StepError
from lmi_build.planning.plan import BuildPlan
from lmi_build.trtllm.profile_schema import ContainerProfile
from lmi_build.trtllm.steps import Step

RunnerKind = Literal["local", "docker", "script"]
LOG_DIR = "build-logs"
TAIL_LINES = 5
CONTAINER_MOUNTS = {"model": "/work/model", "checkpoint": "/work/checkpoint", "engine": "/work/engine",
                    "examples": "/work/trtllm-examples"}
SCRIPT_VARS = {"model": "MODEL_DIR", "checkpoint": "CHECKPOINT_DIR", "engine": "ENGINE_DIR",
               "examples": "TRTLLM_EXAMPLES", "workers": "WORKERS"}


@dataclass(frozen=True)
class StepResult:
    name: str
    seconds: float
    where: str
    log: Path | None
    detail: str | None = None


@dataclass(frozen=True)
class Paths:
    """The host directories a build reads and writes."""

    model: Path
    checkpoint: Path
    engine: Path
    examples: Path | None = None  # a TensorRT-LLM checkout at the profile's tag (vendor scripts only)

    def get(self, name: str) -> Path | None:
        value: Path | None = getattr(self, name)
        return value


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


def bind(argv: list[str], values: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in every argument."""
    bound: list[str] = []
    for arg in argv:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", value)
        bound.append(arg)
    return bound


def _workers(plan: BuildPlan | None, gpus: int) -> int:
    world = plan.build.tp * getattr(plan.build, "pp", 1) if plan is not None and plan.build is not None else 1
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


def stream_process(argv: list[str], *, name: str, log_path: Path, timeout_s: float,
                   env: dict[str, str] | None = None, cwd: str | None = None) -> None:
    """Run ``argv`` in its own process group; print and log each line as it comes.

    Raises ``StepError`` (with the last lines) on a nonzero exit or a timeout.
    """

    from lmi_build.output import current

    out = current()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    try:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env,
                                   cwd=cwd, start_new_session=True, text=True, bufsize=1, errors="replace")
    except FileNotFoundError:
        raise StepError(f"step '{name}': {argv[0]} not found", hint="install it or use another runner") from None
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, _kill)
    timer.start()
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write("$ " + shlex.join(argv) + "\n")
            for raw in process.stdout or ():
                line = raw.rstrip("\n")
                log.write(line + "\n")
                log.flush()
                tail.append(line)
                out.log_line(f"[{name}]", line)
        code = process.wait()
    except KeyboardInterrupt:
        _kill()
        process.wait()
        raise
    finally:
        timer.cancel()
    last = " | ".join(tail) if tail else "no output"
    if timed_out.is_set():
        raise StepError(f"step '{name}' timed out after {timeout_s:g}s and was killed; last lines: {last}",
                        hint=f"full log: {log_path}")
    if code != 0:
        raise StepError(f"step '{name}' failed (exit {code}); last lines: {last}", hint=f"full log: {log_path}")


def _run_python_call(step: Step, paths: Paths, work_dir: Path, plan: BuildPlan | None) -> None:
    """A host step implemented in Python (ModelOpt export by the quantize package)."""
    if step.python_call is None or plan is None:
        raise StepError(f"step '{step.name}' needs the build plan")
    module_name, func_name = step.python_call.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:
            raise StepError(f"step '{step.name}': {module_name} is not available in this lmi-build",
                            hint="update lmi-build") from None
        raise MissingDependency.for_module(error.name or module_name, "convert") from None
    getattr(module, func_name)(plan, paths.model, paths.checkpoint)


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
        try:
            if step.python_call is not None:
                _run_python_call(step, paths, work_dir, plan)
            else:
                stream_process(self._argv(step, paths, plan), name=step.name, log_path=log_path,
                               timeout_s=step.timeout_s, env={**step.env, **self.extra_env}, cwd=step.cwd)
        except BaseException:
            _remove_outputs(step, paths)
            raise
        return StepResult(name=step.name, seconds=round(time.perf_counter() - start, 3), where=self.kind,
                          log=log_path if log_path.exists() else None)


@dataclass
class LocalRunner(_ExecutingRunner):
    """The TensorRT-LLM tools on this host's PATH do the work."""

    kind: RunnerKind = "local"

    def _argv(self, step: Step, paths: Paths, plan: BuildPlan | None) -> list[str]:
        gpus = self.gpus if self.gpus is not None else gpu_count()
        values = {name: str(p) for name in CONTAINER_MOUNTS if (p := paths.get(name)) is not None}
        values["workers"] = str(_workers(plan, gpus))
        return bind(step.argv, values)


@dataclass
class DockerRunner(_ExecutingRunner):
    """The profile's own container (its TensorRT-LLM) does the work; directories are bind-mounted."""

    kind: RunnerKind = "docker"
    image: str = ""
    docker: str = "docker"

    def _argv(self, step: Step, paths: Paths, plan: BuildPlan | None) -> list[str]:
        gpus = self.gpus if self.gpus is not None else gpu_count()
        return docker_argv(step, paths, self.image, workers=_workers(plan, gpus), docker=self.docker)


def docker_argv(step: Step, paths: Paths, image: str, *, workers: int, docker: str = "docker") -> list[str]:
    argv = [docker, "run", "--rm", "--gpus", "all", "--ipc=host", "--ulimit", "memlock=-1",
            "--user", f"{os.getuid()}:{os.getgid()}"]
    for name, mount in CONTAINER_MOUNTS.items():
        path = paths.get(name)
        if path is None or (name not in step.inputs and name not in step.outputs):
            continue
        read_only = name in ("model", "examples") or name not in step.outputs
        argv += ["-v", f"{path.resolve()}:{mount}{':ro' if read_only else ''}"]
    for key, value in sorted(step.env.items()):
        argv += ["-e", f"{key}={value}"]
    values = dict(CONTAINER_MOUNTS)
    values["workers"] = str(workers)
    argv += [image, *bind(step.argv, values)]
    return argv


@dataclass
class ScriptRunner:
    """Writes every step into one POSIX shell script instead of running it (``--dry-run``)."""

    kind: RunnerKind = "script"
    image: str | None = None  # set: the script runs the steps in this container with docker
    lines: list[str] = field(default_factory=list)

    def run(self, step: Step, paths: Paths, work_dir: Path, plan: BuildPlan | None) -> StepResult:
        self.lines.append(f"# step: {step.name} ({step.where})")
        if step.python_call is not None:
            self.lines.append(f"# produced on the lmi-build host by {step.python_call} (ModelOpt)")
            self.lines.append('test -f "$CHECKPOINT_DIR/config.json" || { echo "missing checkpoint '
                              '$CHECKPOINT_DIR/config.json (run lmi-build first)" >&2; exit 1; }')
        else:
            values = {name: "${" + var + "}" for name, var in SCRIPT_VARS.items()}
            if self.image is not None:
                mounts = dict(CONTAINER_MOUNTS)
                command = [_quote_keep_vars(a) for a in ["docker", "run", "--rm", "--gpus", "all", "--ipc=host",
                                                         "--ulimit", "memlock=-1"]]
                command += ["--user", '"$(id -u):$(id -g)"']
                for name, mount in mounts.items():
                    if name in step.inputs or name in step.outputs:
                        ro = "" if name in step.outputs else ":ro"
                        command += ["-v", f'"${{{SCRIPT_VARS[name]}}}:{mount}{ro}"']
                command.append(shlex.quote(self.image))
                inner = bind(step.argv, {**mounts, "workers": "${WORKERS}"})
                command += [_quote_keep_vars(a) for a in inner]
            else:
                command = [_quote_keep_vars(a) for a in bind(step.argv, values)]
            for name in step.outputs:
                self.lines.append(f'mkdir -p "${{{SCRIPT_VARS[name]}}}"')
            self.lines.append(_wrap(command) + f' 2>&1 | tee "$LOG_DIR/{step.name}.log"')
        self.lines.append("")
        return StepResult(name=step.name, seconds=0.0, where="script", log=None, detail="written to script")

    def script(self, paths: Paths, *, header: str = "") -> str:
        defaults = {"MODEL_DIR": paths.model, "CHECKPOINT_DIR": paths.checkpoint, "ENGINE_DIR": paths.engine,
                    "TRTLLM_EXAMPLES": paths.examples or "./TensorRT-LLM/examples"}
        lines = ["#!/bin/sh", "# Written by lmi-build (script runner). Runs the TensorRT-LLM engine build steps.",
                 *(f"# {h}" for h in header.splitlines() if h), "set -eu",
                 "# pipefail where the shell has it, so a failing tool fails the script despite tee",
                 "(set -o pipefail) 2>/dev/null && set -o pipefail"]
        for var, value in defaults.items():
            lines.append(f': "${{{var}:={shlex.quote(str(value))}}}"')
        lines += [': "${LOG_DIR:=build-logs}"',
                  "# docker bind mounts need absolute paths; a relative one would name a volume instead",
                  'abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else printf "%s" "$1"; fi; }',
                  'mkdir -p "$ENGINE_DIR"',
                  *(f'{var}=$(abspath "${var}")' for var in ("MODEL_DIR", "CHECKPOINT_DIR", "ENGINE_DIR",
                                                              "TRTLLM_EXAMPLES")),
                  'if [ -z "${WORKERS:-}" ]; then',
                  '  WORKERS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU " || true)',
                  '  [ "$WORKERS" -ge 1 ] 2>/dev/null || WORKERS=1',
                  'fi',
                  'mkdir -p "$LOG_DIR"', "", *self.lines]
        return "\n".join(lines).rstrip("\n") + "\n"


def _wrap(words: list[str]) -> str:
    """One flag (with its values) per continuation line, for a readable script."""
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("-") and lines[-1] and len(lines) + len(lines[-1]) > 1:
            lines.append([])
        lines[-1].append(word)
    return " \\\n    ".join(" ".join(line) for line in lines)


def _quote_keep_vars(arg: str) -> str:
    """Shell-quote an argument but let ``${VAR}`` references expand (double quotes)."""
    if "${" not in arg:
        return shlex.quote(arg)
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'"{escaped}"'


def make_runner(kind: RunnerKind, profile: ContainerProfile, *, gpus: int | None = None,
                env: dict[str, str] | None = None, docker: str = "docker",
                script_in_container: bool = True) -> Runner:
    if kind == "local":
        return LocalRunner(gpus=gpus, extra_env=dict(env or {}))
    if kind == "docker":
        return DockerRunner(gpus=gpus, extra_env=dict(env or {}), image=profile.image, docker=docker)
    if kind == "script":
        return ScriptRunner(image=profile.image if script_in_container else None)
    raise LmiBuildError(f"unknown runner '{kind}'", hint="use local, docker or script")


def toolchain_available(runner_kind: RunnerKind, profile: ContainerProfile,
                        steps: list[Step] | None = None) -> tuple[bool, str]:
    """Whether the runner can build engines here, and if not, why (one line)."""
    if runner_kind == "script":
        return True, "script runner: nothing runs here"
    problems: list[str] = []
    if runner_kind == "local":
        programs = {"trtllm-build"} if profile.workflow != "legacy" else {"python3"}
        for step in steps or []:
            if step.python_call is None and step.where == "container":
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


def run_steps(steps: list[Step], runner: Runner, work_dir: Path, paths: Paths,
              plan: BuildPlan | None = None) -> list[StepResult]:
    """Run the steps in order; the first failure stops the build (its outputs already removed)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    return [runner.run(step, paths, work_dir, plan) for step in steps]


def finish_command(plan: BuildPlan, profile: ContainerProfile, *, checkpoint: Path, output: Path,
                   model_ref: str | None = None) -> str:
    """The command that finishes a build stopped after the checkpoint, on a GPU host."""
    ref = model_ref or plan.model.id
    parts = ["lmi-build", "trtllm", "--model", ref, "--profile", profile.name, "--runner", "docker",
             "--checkpoint", str(checkpoint), "--output", str(output)]
    return shlex.join(parts)
