"""The ``--runner script`` bundle, one writer for every target: a directory holding ``plan.json``,
what its steps read (the model, a converted checkpoint, a driver) and one POSIX shell script that
runs the steps on a host without lmi-build; then the command that packages what the script produced.

Targets differ only in data (``BundleSpec``): the script's name and purpose, the directory it
produces, the image and docker device arguments, and the host requirements of their accelerator.
Every script checks its host first (``./<script> --check`` checks and stops): each requirement is
printed ``ok`` or ``missing`` with its fix, and a missing one stops the run before any step. The
requirements every bundle shares come from the steps themselves: docker, its daemon and the login
for the image's registry (``RUNNER=docker``), the steps' programs on PATH (``RUNNER=local``) and the
directories the steps read. The fixes are facts in ``lmi_build/data/bundle_host.toml``.
"""

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from lmi_build.artifact.packager import install_directory
from lmi_build.core.fs import link_tree
from lmi_build.core.tables import bundled_table
from lmi_build.core.types import Record
from lmi_build.planning.saved import PLAN_FILE, SavedPlan
from lmi_build.runners.executing import GPU_DEVICE_ARGS
from lmi_build.runners.script import ScriptRunner
from lmi_build.runners.step import Paths, Step, bind

# A finishing command's output: "<stopped>-artifact", then "-artifact-2", "-artifact-3", ... for an
# output already named so (never "x-artifact-artifact").
_FINISHED = re.compile(r"^(?P<base>.+)-artifact(?:-(?P<n>[0-9]+))?$")


class _Docker(Record):
    source: str
    install: str
    daemon: str


class _Fix(Record):
    source: str
    fix: str


class _Registry(Record):
    source: str
    ecr_host: str
    ecr_login: str
    other_login: str


class HostFacts(Record):
    """``lmi_build/data/bundle_host.toml``."""

    sources: dict[str, str]
    docker: _Docker
    nvidia_runtime: _Fix
    registry: _Registry
    gpu: _Fix


def host_facts() -> HostFacts:
    return bundled_table("bundle_host.toml", HostFacts)


@dataclass(frozen=True)
class Requirement:
    """One thing the bundle's host must have. ``test`` is a POSIX sh command (usually one of the
    script's check helpers, ``_HELPERS``), true when the host has it; it may set ``found`` to what it
    saw. ``fix`` is printed when it is missing. ``runner``: only with that ``RUNNER`` (None: always)."""

    what: str
    test: str
    fix: str
    runner: Literal["docker", "local"] | None = None


@dataclass(frozen=True)
class BundleSpec:
    """What one target's bundle is; everything else is the shared writer's."""

    script: str  # "build-engines.sh"
    purpose: str  # "TensorRT-LLM engine build steps", for the script's first comment
    final: str  # the placeholder of the directory the script produces ("engine", "compiled")
    image: str | None  # set: RUNNER=docker (the default) runs each step in this image
    devices: tuple[str, ...] = GPU_DEVICE_ARGS  # docker arguments giving the container its accelerators
    header: str = ""  # more comment lines (profile, plan)
    defaults: Mapping[str, str] = field(default_factory=dict)  # directories outside the bundle, by placeholder
    dir_fixes: Mapping[str, str] = field(default_factory=dict)  # a step's input directory is missing: what to do
    tool_fix: str = "run inside the profile's image (RUNNER=docker does)"  # RUNNER=local, a program not on PATH
    requirements: tuple[Requirement, ...] = ()  # the target's own: its accelerator


def finished_output(output: Path) -> Path:
    """Where the command that finishes a build stopped at ``output`` puts the artifact: beside it,
    ``<name>-artifact``; a name that already ends so counts on (``-artifact-2``)."""
    match = _FINISHED.match(output.name)
    if match is None:
        return output.with_name(f"{output.name}-artifact")
    return output.with_name(f"{match['base']}-artifact-{int(match['n'] or 1) + 1}")


def run_script_command(bundle: Path, script: str) -> str:
    """The shell command that runs a bundle's script where it lies."""
    return f"(cd {shlex.quote(str(bundle))} && ./{script})"


def write_bundle(spec: BundleSpec, steps: Sequence[Step], paths: Paths, *, bundle: Path, saved: SavedPlan,
                 output: Path, overwrite: bool, package: str, linked: Mapping[str, Path] | None = None) -> str:
    """Finish the bundle the target started in ``bundle`` (what it moved there stays): link each
    ``linked`` directory in (name in the bundle -> source; hard links where possible), write the
    script of ``steps`` with ``paths`` (relative to the bundle) and plan.json, install it at
    ``output``; returns the next command: run the script there, then ``package``."""
    for name, source in (linked or {}).items():
        link_tree(source, bundle / name)  # self-contained: the bundle travels to the host as one directory
    runner = ScriptRunner(image=spec.image, devices=spec.devices)
    for step in steps:
        runner.run(step, paths, bundle, saved.plan)
    script = bundle / spec.script
    script.write_text(bundle_script(runner, spec, paths), encoding="utf-8")
    script.chmod(0o755)
    saved.save(bundle / PLAN_FILE)
    install_directory(bundle, output, overwrite=overwrite)
    return f"{run_script_command(output, spec.script)} && {package}"


# ---- requirements a target adds ----

def nvidia_runtime_requirement() -> Requirement:
    return Requirement(what="the NVIDIA container runtime (docker info lists the nvidia runtime)",
                       test="nvidia_runtime", fix=host_facts().nvidia_runtime.fix, runner="docker")


def gpu_requirement(sm: str | None = None, *, minimum: int | None = None, why: str = "") -> Requirement:
    """A GPU (nvidia-smi), of SM ``sm`` exactly (engines run only on the SM they were built on) or
    of at least ``minimum``; ``why`` says where the plan's SM comes from."""
    fix = host_facts().gpu.fix
    if sm is not None:
        return Requirement(what=f"a GPU of {sm}{f' ({why})' if why else ''}", test=f"gpu_sm {shlex.quote(sm)}",
                           fix=f"{fix}; the engines run only on the SM they are built on: build on a {sm} GPU, "
                               "or plan again for this host's GPU (--gpu, --instance-type)")
    if minimum is not None:
        return Requirement(what=f"a GPU of sm{minimum} or newer{f' ({why})' if why else ''}",
                           test=f"gpu_sm '>=sm{minimum}'", fix=f"{fix}, of sm{minimum} or newer")
    return Requirement(what="a GPU (nvidia-smi)", test="gpu_sm ''", fix=fix)


def registry_requirement(image: str) -> Requirement | None:
    """A docker login for the registry of ``image`` (ECR: the aws ecr command for its region); None
    for an image of Docker Hub (public, no login)."""
    host = image.split("/", 1)[0] if "/" in image else ""
    if not ("." in host or ":" in host or host == "localhost"):
        return None
    facts = host_facts().registry
    ecr = re.match(facts.ecr_host, host)
    login = (facts.ecr_login.format(region=ecr["region"], registry=host) if ecr
             else facts.other_login.format(registry=host))
    return Requirement(what=f"a docker login for {host} (or the image pulled already)",
                       test=f"registry_login {shlex.quote(image)} {shlex.quote(host)}", fix=login, runner="docker")


# ---- the script ----

# The check helpers every script carries. Each is a test: true when the host has the thing; it may
# set $found to what it saw.
_HELPERS = r"""# check WHAT FIX TEST...: run TEST, print "ok" or "missing" with the fix
check() {
  what=$1; fix=$2; shift 2; found=""
  if "$@" >/dev/null 2>&1; then
    echo "ok       $what${found:+ ($found)}"
  else
    echo "missing  $what${found:+ ($found)}"
    echo "         fix: $fix"
    check_failed=1
  fi
}
on_path() { command -v "$1"; }
docker_daemon() { docker info; }
nvidia_runtime() { docker info 2>/dev/null | grep -i 'runtimes:' | grep -q nvidia; }
# registry_login IMAGE REGISTRY: the image is here already, or docker keeps a login for its registry
registry_login() {
  if docker image inspect "$1"; then found="image already pulled"; return 0; fi
  grep -qF "$2" "${DOCKER_CONFIG:-${HOME:-}/.docker}/config.json"
}
# dir_has DIR: a directory with something in it
dir_has() { found=$1; [ -d "$1" ] && [ -n "$(ls -A "$1")" ]; }
# gpu_sm WANT: GPU 0's SM is WANT (smNN), at least WANT (>=smNN), or any GPU ("")
gpu_sm() {
  line=$(nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader 2>/dev/null | head -n 1)
  [ -n "$line" ] || return 1
  have="sm$(printf '%s' "${line%%,*}" | tr -d ' .')"
  found="found $have,${line#*,}"
  case "$1" in
    "") [ "$have" != sm ] ;;
    ">="*) [ "${have#sm}" -ge "${1#>=sm}" ] ;;
    *) [ "$have" = "$1" ] ;;
  esac
}
# devices_present ARG...: each docker --device=PATH[:...] argument names a device this host has
devices_present() {
  [ "$#" -ge 1 ] || return 1
  for arg in "$@"; do
    dev=${arg#--device=}; dev=${dev%%:*}
    [ -e "$dev" ] || { found="no $dev"; return 1; }
  done
}"""


def host_requirements(spec: BundleSpec, steps: Sequence[Step], paths: Paths) -> list[Requirement]:
    """Everything the host needs for ``steps``: the shared requirements, then the target's."""
    docker = host_facts().docker
    needs: list[Requirement] = []
    if spec.image is not None:
        needs += [Requirement(what="docker installed", test="on_path docker", fix=docker.install, runner="docker"),
                  Requirement(what="the docker daemon reachable (docker info)", test="docker_daemon",
                              fix=docker.daemon, runner="docker")]
        login = registry_requirement(spec.image)
        if login is not None:
            needs.append(login)
    tools: list[str] = []
    variables = {name: "${" + paths.dir(name).variable + "}" for name in paths.names()}
    for step in steps:
        program = bind(step.argv[:1], variables)[0] if step.argv and step.in_process is None else ""
        if program and "$" not in program and "{" not in program and program not in tools:
            tools.append(program)
    local: Literal["local"] | None = "local" if spec.image is not None else None
    needs += [Requirement(what=f"{tool} on PATH", test=f"on_path {shlex.quote(tool)}", fix=spec.tool_fix,
                          runner=local) for tool in tools]
    produced: set[str] = set()
    for step in steps:
        # an in-process step ran on the lmi-build host: its output must have come with the bundle
        reads = step.outputs if step.in_process is not None else step.inputs
        for name in reads:
            if name in produced or name not in paths.names():
                continue
            produced.add(name)
            variable = paths.dir(name).variable
            fix = spec.dir_fixes.get(name, f"set {variable} to the {name} directory")
            needs.append(Requirement(what=f"the {name} directory {variable}", test=f'dir_has "${variable}"', fix=fix))
        produced.update(step.outputs)
    return needs + list(spec.requirements)


def _check_function(spec: BundleSpec, needs: Sequence[Requirement]) -> list[str]:
    def line(need: Requirement, indent: str) -> str:
        return f"{indent}check {shlex.quote(need.what)} {shlex.quote(need.fix)} {need.test}"

    lines = ["# check_host: every requirement of this host, ok or missing with its fix; false if one is missing",
             "check_host() {", "  check_failed=0", f'  echo "{spec.script}: checking this host (RUNNER=${{RUNNER:-local}})"']
    by_runner = {kind: [n for n in needs if n.runner == kind] for kind in ("docker", "local")}
    if spec.image is not None and (by_runner["docker"] or by_runner["local"]):
        lines.append('  if [ "$RUNNER" = docker ]; then')
        lines += [line(n, "    ") for n in by_runner["docker"]] or ["    :"]
        lines.append("  else")
        lines += [line(n, "    ") for n in by_runner["local"]] or ["    :"]
        lines.append("  fi")
    else:
        lines += [line(n, "  ") for n in needs if n.runner is not None]
    lines += [line(n, "  ") for n in needs if n.runner is None]
    lines += ['  return "$check_failed"', "}"]
    return lines


def _written(runner: ScriptRunner, paths: Paths, final: str) -> list[str]:
    """The variables of the directories the script's steps write (the final one first), each once."""
    found = [final]
    for step in runner.steps:
        if step.in_process is not None:
            continue
        for name in step.outputs:
            var = paths.dir(name).variable
            if name in paths.names() and var not in found:
                found.append(var)
    return found


def _default_line(variable: str, value: str) -> str:
    """The line that gives ``variable`` its default unless the caller set it: ``value`` as it is when
    absolute (or empty), else that path in the bundle (``$BUNDLE_DIR``), whatever the current directory."""
    if not value or value.startswith("/"):
        return f': "${{{variable}:={shlex.quote(value)}}}"'
    relative = str(PurePosixPath(value))  # "./TensorRT-LLM/examples" -> "TensorRT-LLM/examples"
    in_bundle = '"$BUNDLE_DIR"' + ("" if relative == "." else f"/{shlex.quote(relative)}")
    return f'[ -n "${{{variable}:-}}" ] || {variable}={in_bundle}'


def bundle_script(runner: ScriptRunner, spec: BundleSpec, paths: Paths) -> str:
    """The script: ``paths`` are its directory defaults (relative ones are in the bundle, the
    directory the script lies in, from whatever directory it is run), each overridable through its
    variable; ``spec.defaults`` fills directories ``paths`` leaves unset; the steps are those
    ``runner`` collected."""
    values: dict[str, str] = {}
    for name in paths.names():
        path = paths.get(name)
        values[paths.dir(name).variable] = str(path) if path is not None else spec.defaults.get(name, "")
    needs = host_requirements(spec, runner.steps, paths)
    final = paths.dir(spec.final).variable
    lines = ["#!/bin/sh", f"# Written by lmi-build (script runner). Runs the {spec.purpose}.",
             *(f"# {h}" for h in spec.header.splitlines() if h),
             f"# Usage: ./{spec.script} [--check]",
             "#   --check: only check this host: each requirement ok or missing, with its fix (exit 1: one is missing).",
             "#   Every run starts with the same check and stops before any step when something is missing.",
             "set -eu"]
    lines += ["# the bundle is the directory this script lies in, wherever it is run from: a relative default",
              "# below is a path in it (a relative path set by the caller stays relative to the current directory)",
              'case "$0" in */*) BUNDLE_DIR=${0%/*} ;; *) BUNDLE_DIR=. ;; esac',
              'BUNDLE_DIR=$(CDPATH="" cd -- "$BUNDLE_DIR" && pwd)']
    lines += [_default_line(var, value) for var, value in values.items()]
    if spec.image is not None:
        lines += ["# RUNNER=docker runs each step in the image above; RUNNER=local runs the tools on PATH",
                  "# (e.g. inside that container, or on a host with the same toolchain installed)",
                  ': "${RUNNER:=docker}"']
    lines += [_default_line("LOG_DIR", "build-logs"), _HELPERS, *_check_function(spec, needs),
              'case "${1:-}" in',
              "  --check) check_host; exit $? ;;",
              '  "") check_host || { echo "this host lacks what is marked missing above: fix it, then run '
              f'./{spec.script} --check" >&2; exit 1; }} ;;',
              f'  *) echo "usage: ./{spec.script} [--check]" >&2; exit 2 ;;',
              "esac",
              "# docker bind mounts need absolute paths; a relative one would name a volume instead: every",
              "# directory a step writes exists before it is made absolute, and a relative path that does not",
              "# exist is made absolute against the current directory",
              'abspath() { if [ -d "$1" ]; then (cd "$1" && pwd); else case "$1" in ""|/*) printf "%s" "$1" ;; '
              '*) printf "%s/%s" "$(pwd)" "$1" ;; esac; fi; }',
              *(f'mkdir -p "${var}"' for var in _written(runner, paths, final)),
              *(f'{var}=$(abspath "${var}")' for var in values),
              'if [ -z "${WORKERS:-}" ]; then',
              '  WORKERS=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU " || true)',
              '  [ "$WORKERS" -ge 1 ] 2>/dev/null || WORKERS=1',
              'fi',
              'mkdir -p "$LOG_DIR"',
              "# run_step NAME COMMAND...: stream and log one step; its failure fails the script",
              "# (POSIX sh has no pipefail, so the exit status travels through a file past tee)",
              "run_step() {",
              '  step=$1; shift',
              '  { if "$@" 2>&1; then rc=0; else rc=$?; fi; echo "$rc" > "$LOG_DIR/$step.status"; } | tee "$LOG_DIR/$step.log"',
              '  status=$(cat "$LOG_DIR/$step.status"); rm -f "$LOG_DIR/$step.status"',
              '  if [ "$status" -ne 0 ]; then',
              '    echo "step $step failed (exit $status); log: $LOG_DIR/$step.log" >&2',
              '    exit "$status"',
              "  fi",
              "}",
              "", *runner.lines]
    return "\n".join(lines).rstrip("\n") + "\n"
