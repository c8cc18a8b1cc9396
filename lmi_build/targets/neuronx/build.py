"""Build the ``neuronx`` target: the driver compiles the NEFFs with the plan's TNX kwargs in the
profile's image (``docker``), on this host when its Neuron SDK is the profile's (``local``), or a
self-contained ``build-neffs.sh`` + ``plan.json`` bundle runs it on a Neuron host (``script``)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lmi_build.artifact.manifest import HardwareTarget, StepTiming
from lmi_build.building.context import BuildContext, BuildOutcome, BuildSettings
from lmi_build.building.run_settings import narrowed
from lmi_build.building.target import Unfinished
from lmi_build.core.errors import SourceError, UnsupportedTarget
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import PLAN_FILE, SavedPlan
from lmi_build.reporting import events
from lmi_build.reporting.output import current
from lmi_build.runners import LOG_DIR, make_runner
from lmi_build.runners.bundle import finished_output, run_script_command, write_bundle
from lmi_build.targets.neuronx.cache_tree import compiler_dirs, remove_unusable
from lmi_build.targets.neuronx.command import NeuronxRun
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.layouts import LAYOUTS
from lmi_build.targets.neuronx.plan import unbuilt_reason
from lmi_build.targets.neuronx.profiles import NeuronProfile, get_profile
from lmi_build.targets.neuronx.steps import (
    BUNDLE_SCRIPT,
    DRIVER_SOURCE,
    compile_step,
    host_neuron_devices,
    neff_bundle,
    neuronx_paths,
    write_driver,
)

# The Python with the Neuron SDK that --runner local uses (default: the one running lmi-build).
NEURON_PYTHON_ENV = "LMI_BUILD_NEURON_PYTHON"
STAND_IN_MARKER = "STAND-IN"  # a file a stand-in compiler leaves in compiled/; the real SDK never does
CACHE_DIR = "neuron-cache"
CACHE_LAYOUT = "neuronx-cache"
PROBE_TIMEOUT_S = 120
LEGACY_LAYOUT = "neuronx-legacy"
OPTIMUM_LAYOUT = "neuronx-optimum"
SPLIT_LAYOUT = "neuronx-split"


@dataclass(frozen=True)
class CompiledInfo:
    neuronx_cc: str | None  # compiled/VERSION, or the cache tree's neuronxcc-<version> directory
    stand_in: bool


def neuron_python() -> str:
    return os.environ.get(NEURON_PYTHON_ENV) or sys.executable


def probe_sdk(python: str) -> dict[str, str]:
    """The Neuron SDK versions ``python`` imports, asked through the driver's --probe; refuses
    (one line) when it has none."""
    try:
        done = subprocess.run([python, str(DRIVER_SOURCE), "--probe"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UnsupportedTarget(f"cannot run {python} to look for the Neuron SDK ({error})",
                                hint=f"set {NEURON_PYTHON_ENV} to the python of a Neuron SDK install, "
                                     "or use --runner docker / --runner script") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UnsupportedTarget(f"--runner local needs the Neuron SDK: {why}",
                                hint=f"use --runner docker on an inf2/trn1 host, --runner script for a bundle, "
                                     f"or set {NEURON_PYTHON_ENV} to a python with the SDK")
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def preflight(saved: SavedPlan, settings: BuildSettings) -> None:
    """Refuse what cannot work before anything is fetched or compiled."""
    plan, run = saved.plan, narrowed(settings.run, NeuronxRun)
    knobs = plan.knobs(NeuronxBuild)
    profile = get_profile(plan.toolchain.profile)
    if (unbuilt := unbuilt_reason(profile, knobs.loader, knobs.layout)) is not None:
        raise UnsupportedTarget(unbuilt[0], hint=unbuilt[1])
    if run.compiled_dir is not None:
        if not run.compiled_dir.is_dir():
            raise SourceError(f"--compiled-dir {run.compiled_dir} is not a directory",
                              hint=f"give the compiled/ directory {BUNDLE_SCRIPT} wrote")
        return
    if run.runner == "docker" and not profile.image:
        raise UnsupportedTarget(f"{profile.name} has no published container image to compile in",
                                hint=f"use --runner local or --runner script on a host with Neuron SDK "
                                     f"{profile.neuron_sdk}, or a published profile")
    if run.runner == "docker" and not host_neuron_devices():
        raise UnsupportedTarget("--runner docker needs this host's Neuron devices (/dev/neuron*): "
                                "transformers-neuronx loads the NEFFs onto them while compiling",
                                hint="run on an inf2/trn1 host, or use --runner script for a bundle to run there")
    if run.runner == "local":
        versions = probe_sdk(neuron_python())
        found = versions.get("neuronx_cc")
        if knobs.loader == "optimum" and versions.get("optimum_neuron") != profile.optimum_neuron:
            # optimum-neuron builds its own TNX config: another version compiles other graphs.
            raise UnsupportedTarget(f"optimum-neuron {versions.get('optimum_neuron')} here, {profile.name} has "
                                    f"{profile.optimum_neuron}: its export would not be the container's",
                                    hint=f"install optimum-neuron=={profile.optimum_neuron}, or use --runner docker")
        if found != profile.neuronx_cc:
            raise UnsupportedTarget(f"neuronx-cc {found} here, {profile.name} has {profile.neuronx_cc}: its NEFFs "
                                    "would not match the container's compile cache",
                                    hint=f"install Neuron SDK {profile.neuron_sdk}, use --runner docker, "
                                         "or --profile the container that has this compiler")


def build(ctx: BuildContext) -> None:
    plan, run = ctx.plan, narrowed(ctx.settings.run, NeuronxRun)
    knobs = plan.knobs(NeuronxBuild)
    profile = get_profile(plan.toolchain.profile)
    ctx.layout = LAYOUTS[knobs.layout]
    cache_layout = knobs.layout == CACHE_LAYOUT
    if run.compiled_dir is not None:
        produced = run.compiled_dir.absolute()
    else:
        compiled = ctx.work / "compiled"
        cache = ctx.work / CACHE_DIR
        driver = ctx.work / "driver"
        write_driver(driver, plan, profile)
        paths = neuronx_paths(driver=driver, model=ctx.source.path, compiled=compiled, cache=cache)
        if run.runner == "script":
            ctx.stopped = _write_bundle(ctx, profile)
            return
        python = neuron_python() if run.runner == "local" else "python3"
        step = compile_step(python, timeout_s=run.step_timeout_s)
        runner = make_runner(run.runner, image=profile.image, devices=host_neuron_devices())
        with events.step("compile", detail=f"{runner.kind} runner, {profile.name}"):
            result = runner.run(step, paths, ctx.work, plan)
        ctx.record.steps.append(StepTiming(name="compile", seconds=result.seconds,
                                           detail=f"{runner.kind} runner, {profile.name}"))
        for entry in remove_unusable(cache):  # never shipped nor trusted: the container would replay it
            current().warn(f"removed unusable compile-cache entry {entry}")
        produced = cache if cache_layout else compiled
        logs = ctx.work / LOG_DIR
        if logs.is_dir() and not cache_layout:
            shutil.copytree(logs, compiled / LOG_DIR, dirs_exist_ok=True)
    if cache_layout:
        info = inspect_cache(produced)
    elif knobs.layout == OPTIMUM_LAYOUT:
        info = inspect_optimum_export(produced)
    else:
        info = inspect_compiled(produced, legacy=knobs.layout in (LEGACY_LAYOUT, SPLIT_LAYOUT))
    if info.neuronx_cc != profile.neuronx_cc:
        # The container's compile cache would not match: it would compile again at start-up (or fail).
        raise SourceError(f"{produced} was compiled by neuronx-cc {info.neuronx_cc}, {profile.name} has "
                          f"{profile.neuronx_cc}", hint=f"compile with Neuron SDK {profile.neuron_sdk} "
                          "(the profile's image), or plan for the profile of that compiler (--profile)")
    ctx.record.toolchain["neuronx_cc"] = info.neuronx_cc or ""
    ctx.record.hardware = HardwareTarget(neuron_platform=knobs.platform)
    if info.stand_in:
        ctx.record.toolchain["stand_in"] = "true"
        current().warn("the NEFFs were written by a STAND-IN Neuron compiler: this is not a real compile")
    ctx.stand_in = info.stand_in
    ctx.produced = produced


def inspect_compiled(produced: Path, *, legacy: bool = False) -> CompiledInfo:
    """What the compile left: the neuronx-cc version it wrote to VERSION, and a stand-in's mark.
    The legacy layout's compile leaves ``checkpoint/`` and ``compiled/`` under ``produced``."""
    compiled = produced / "compiled" if legacy else produced
    version_file = compiled / "VERSION"
    if not version_file.is_file() or not any(compiled.glob("*.neff")):
        raise SourceError(f"{compiled} is not a compiled TNX directory (VERSION and *.neff expected)",
                          hint="compile first (lmi-build neuronx, or the bundle's build-neffs.sh)")
    if legacy and not any((produced / "checkpoint").iterdir() if (produced / "checkpoint").is_dir() else ()):
        raise SourceError(f"{produced}/checkpoint is missing or empty: the legacy layouts load their weights there",
                          hint="give the directory build-neffs.sh wrote (checkpoint/ and compiled/)")
    return CompiledInfo(neuronx_cc=version_file.read_text(encoding="utf-8").strip() or None,
                        stand_in=(produced / STAND_IN_MARKER).exists() or (compiled / STAND_IN_MARKER).exists())


def inspect_optimum_export(produced: Path) -> CompiledInfo:
    """optimum-neuron's export: its config.json ``neuron`` block names the compiler."""
    try:
        block = json.loads((produced / "config.json").read_text(encoding="utf-8")).get("neuron")
    except (OSError, ValueError, AttributeError):
        block = None
    if not isinstance(block, dict) or not any((produced / "compiled").glob("*.neff")):
        raise SourceError(f"{produced} is not an optimum-neuron export (config.json with a neuron block and "
                          "compiled/*.neff expected)", hint="export first (lmi-build neuronx, or build-neffs.sh)")
    version = block.get("compiler_version")
    return CompiledInfo(neuronx_cc=str(version) if version else None,
                        stand_in=(produced / STAND_IN_MARKER).exists())


def inspect_cache(cache: Path) -> CompiledInfo:
    """A compile-cache tree: one neuronxcc-<version>[+hash] directory names the compiler."""
    compilers = compiler_dirs(cache)
    if len(compilers) != 1:
        raise SourceError(f"{cache} holds {len(compilers)} neuronxcc-* compiler directories, not one",
                          hint="give the neuron-cache directory of one compile (build-neffs.sh writes it)")
    version = compilers[0].removeprefix("neuronxcc-").split("+", 1)[0]
    return CompiledInfo(neuronx_cc=version, stand_in=(cache / STAND_IN_MARKER).exists())


def finish_command(plan_file: Path, *, output: Path, compiled_dir: Path | None = None) -> str:
    """``lmi-build neuronx --plan ...``: the command that finishes a build stopped early, shell-quoted."""
    compiled = ["--compiled-dir", str(compiled_dir)] if compiled_dir is not None else []
    return shlex.join(["lmi-build", "neuronx", "--plan", str(plan_file), *compiled, "--output", str(output)])


def _write_bundle(ctx: BuildContext, profile: NeuronProfile) -> BuildOutcome:
    """--runner script: driver/, the model, plan.json and build-neffs.sh; run on a Neuron host, then
    package the compiled/ it writes with exactly this plan."""
    output = ctx.settings.output.absolute()
    bundle = ctx.work / "bundle"
    bundle.mkdir()
    shutil.move(str(ctx.work / "driver"), bundle / "driver")
    relative = neuronx_paths(driver=Path("driver"), model=Path("model"), compiled=Path("compiled"),
                             cache=Path(CACHE_DIR))
    spec = neff_bundle(profile.image or None, profile=profile,
                       header=f"profile {profile.name}; plan {ctx.plan.cache_key}")
    produced = CACHE_DIR if ctx.plan.knobs(NeuronxBuild).layout == CACHE_LAYOUT else "compiled"
    package = finish_command(output / PLAN_FILE, compiled_dir=output / produced, output=finished_output(output))
    next_command = write_bundle(spec, [compile_step("python3", timeout_s=ctx.settings.run.step_timeout_s)], relative,
                                bundle=bundle, saved=ctx.saved, output=output, overwrite=ctx.settings.overwrite,
                                package=package, linked={"model": ctx.source.path})
    return BuildOutcome(plan=ctx.plan, status="script", output=output, steps=list(ctx.record.steps),
                        next_command=next_command,
                        message="driver, model, plan.json and build-neffs.sh written; run the script on a Neuron host",
                        next_host=f"the script on a Neuron host: ./{BUNDLE_SCRIPT} --check lists what that host "
                                  "lacks; the packaging where lmi-build is")


# Where a finishing command that runs neuronx-cc works (verify's word on an unfinished output).
WHERE = ("run it on a Neuron host with the Neuron SDK, or add --runner docker (an inf2/trn1 host with Docker) "
         "or --runner script (a bundle to run there)")


def unfinished(output: Path, plan: BuildPlan) -> Unfinished:
    """What ``output`` (a plan left by exit 3, or a --runner script bundle) lacks, and the command that
    finishes it: the one the build printed as ``next:``."""
    if (output / BUNDLE_SCRIPT).is_file():
        produced = output / (CACHE_DIR if plan.knobs(NeuronxBuild).layout == CACHE_LAYOUT else "compiled")
        package = finish_command(output / PLAN_FILE, compiled_dir=produced, output=finished_output(output))
        if produced.is_dir() and any(produced.iterdir()):
            return Unfinished(f"the packaging of the NEFFs {BUNDLE_SCRIPT} compiled in {produced.name}/", package,
                              bundle=True)
        return Unfinished(f"the compiled NEFFs ({BUNDLE_SCRIPT} has not been run; it runs on a Neuron host)",
                          f"{run_script_command(output, BUNDLE_SCRIPT)} && {package}", bundle=True)
    return Unfinished("the compiled NEFFs (only the plan was written)",
                      finish_command(output / PLAN_FILE, output=finished_output(output)), WHERE)
