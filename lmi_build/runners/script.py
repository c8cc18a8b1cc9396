"""The ``script`` runner: every step written as POSIX shell, for a host without lmi-build (a GPU or
Neuron host), run there in the profile's container or on its PATH. The script around these lines
(its variables, host check and step runner) is written by ``lmi_build.runners.bundle``."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lmi_build.planning.plan import BuildPlan
from lmi_build.runners.executing import GPU_DEVICE_ARGS, RunnerKind
from lmi_build.runners.step import Paths, Step, StepResult, bind


@dataclass
class ScriptRunner:
    """Writes every step into one shell script instead of running it."""

    kind: RunnerKind = "script"
    image: str | None = None  # set: the script runs the steps in this container with docker
    # docker arguments giving the container its accelerators, written as they are (a shell
    # expansion such as ${NEURON_DOCKER_DEVICES:-...} stays live in the script)
    devices: tuple[str, ...] = GPU_DEVICE_ARGS
    lines: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)  # what the script runs, in order (its host check reads them)

    def run(self, step: Step, paths: Paths, work_dir: Path, plan: BuildPlan | None) -> StepResult:
        self.steps.append(step)
        self.lines.append(f"# step: {step.name} ({step.where})")
        if step.in_process is not None:
            self.lines.append(f"# produced on the lmi-build host: {step.in_process}")
            for name in step.outputs:
                var = paths.dir(name).variable
                self.lines.append(f'test -f "${var}/config.json" || {{ echo "missing {name} '
                                  f'${var}/config.json (run lmi-build first)" >&2; exit 1; }}')
        else:
            values = {name: "${" + paths.dir(name).variable + "}" for name in paths.names()}
            values["workers"] = "${WORKERS}"
            on_path = [quote_keep_vars(a) for a in bind(step.argv, values)]
            for name in step.outputs:
                self.lines.append(f'mkdir -p "${{{paths.dir(name).variable}}}"')
            if self.image is None:
                self.lines.append(_wrap(["run_step", step.name, *on_path]))
            else:
                self.lines += ['if [ "$RUNNER" = docker ]; then',
                               _indent(_wrap(["run_step", step.name, *self._in_container(step, paths)])),
                               "else",
                               _indent(_wrap(["run_step", step.name, *on_path])),
                               "fi"]
        self.lines.append("")
        return StepResult(name=step.name, seconds=0.0, where="script", log=None, detail="written to script")

    def _in_container(self, step: Step, paths: Paths) -> list[str]:
        assert self.image is not None
        command = ["docker", "run", "--rm", *self.devices, "--ipc=host", "--ulimit", "memlock=-1",
                   "--user", '"$(id -u):$(id -g)"']
        for name in paths.names():
            if name in step.inputs or name in step.outputs:
                ro = "" if name in step.outputs else ":ro"
                command += ["-v", f'"${{{paths.dir(name).variable}}}:{paths.dir(name).mount}{ro}"']
        for key, value in sorted(step.env.items()):
            command += ["-e", shlex.quote(f"{key}={value}")]
        command.append(shlex.quote(self.image))
        mounts = {name: paths.dir(name).mount for name in paths.names()}
        return command + [quote_keep_vars(a) for a in bind(step.argv, {**mounts, "workers": "${WORKERS}"})]


def _wrap(words: list[str]) -> str:
    """One flag (with its values) per continuation line, for a readable script."""
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("-") and lines[-1] and len(lines) + len(lines[-1]) > 1:
            lines.append([])
        lines[-1].append(word)
    return " \\\n    ".join(" ".join(line) for line in lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def quote_keep_vars(arg: str) -> str:
    """Shell-quote an argument but let ``${VAR}`` references expand (double quotes)."""
    if "${" not in arg:
        return shlex.quote(arg)
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'"{escaped}"'
