"""What `verify`, `inspect` and `publish` say about a directory a build stopped at with exit 3 (a checkpoint
with plan.json, or a `--runner script` bundle): not an artifact, what it lacks, and the command that
finishes it, the same command the build printed as ``next:``."""

from __future__ import annotations

import shlex
from pathlib import Path

from lmi_build.errors import LmiBuildError, VerifyError

# Where a finishing command that runs the vendor tool works, by target.
WHERE = {
    "trtllm": "run it where trtllm-build and a GPU are, or add --runner docker (a GPU host with Docker) or "
              "--runner script (a bundle to run there)",
    "neuronx": "run it on a Neuron host with the Neuron SDK, or add --runner docker (an inf2/trn1 host with Docker) "
               "or --runner script (a bundle to run there)",
}


def unfinished_build(location: str) -> VerifyError | None:
    """The error for ``location`` when it is an exit-3 output (plan.json, no lmi-build.json), else None."""
    from lmi_build.artifact.manifest import MANIFEST_NAME
    from lmi_build.planning.saved import PLAN_FILE
    from lmi_build.targets import load_saved_plan

    if location.startswith("s3://"):
        return None
    directory = Path(location)
    if not directory.is_dir() or (directory / MANIFEST_NAME).exists() or not (directory / PLAN_FILE).is_file():
        return None
    try:
        saved = load_saved_plan(directory / PLAN_FILE)
    except LmiBuildError:
        return None  # not a plan this lmi-build reads: the plain "no manifest" error says enough
    output = directory.absolute()
    target = saved.plan.target
    runs_vendor_tool = True
    if target == "trtllm":
        missing, command, runs_vendor_tool = _trtllm(output)
    elif target == "neuronx":
        missing, command, runs_vendor_tool = _neuronx(output, saved.plan.build)
    else:
        missing, command = "the built model", _finish(target, output)
    where = WHERE.get(target) if runs_vendor_tool else None
    # A --runner script build exited 0 having written its bundle: not a stop (issue 30 item 6).
    script = _bundle_script(target)
    what = (f"a {target} --runner script bundle" if script is not None and (output / script).is_file()
            else f"an unfinished {target} build (it stopped with exit 3)")
    return VerifyError(f"{location} is {what}, not an artifact: "
                       f"it has {PLAN_FILE} but no {MANIFEST_NAME}; missing: {missing}",
                       hint=f"finish it with: {command}" + (f"; {where}" if where else ""))



def _bundle_script(target: str) -> str | None:
    """The script a --runner script build of ``target`` writes into its bundle."""
    if target == "trtllm":
        from lmi_build.targets.trtllm.build import BUNDLE_SCRIPT

        return BUNDLE_SCRIPT
    if target == "neuronx":
        from lmi_build.targets.neuronx.build import BUNDLE_SCRIPT as NEURONX_SCRIPT

        return NEURONX_SCRIPT
    return None


def _finish(target: str, output: Path, *extra: str) -> str:
    from lmi_build.planning.saved import PLAN_FILE
    from lmi_build.runners.bundle import finished_output  # where the build's own `next:` command puts it

    return shlex.join(["lmi-build", target, "--plan", str(output / PLAN_FILE), *extra,
                       "--output", str(finished_output(output))])


def _filled(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _trtllm(output: Path) -> tuple[str, str, bool]:
    """(what is missing, the finishing command, whether that command runs trtllm-build here)."""
    from lmi_build.runners.bundle import run_script_command
    from lmi_build.targets.trtllm.build import BUNDLE_ENGINE, BUNDLE_SCRIPT

    engine = output / BUNDLE_ENGINE
    if (output / BUNDLE_SCRIPT).is_file():
        package = _finish("trtllm", output, "--engine-dir", str(engine))
        if _filled(engine):
            return f"the packaging of the engines {BUNDLE_SCRIPT} built in {BUNDLE_ENGINE}/", package, False
        return (f"the TensorRT-LLM engines ({BUNDLE_SCRIPT} has not been run; it runs on a GPU host)",
                f"{run_script_command(output, BUNDLE_SCRIPT)} && {package}", False)
    if (output / "config.json").is_file():
        return ("the TensorRT-LLM engines (the build stopped after the checkpoint: no TensorRT-LLM toolchain "
                "where it ran)", _finish("trtllm", output, "--checkpoint", str(output)), True)
    return "the checkpoint and the TensorRT-LLM engines (only the plan was written)", _finish("trtllm", output), True


def _neuronx(output: Path, build: object) -> tuple[str, str, bool]:
    """(what is missing, the finishing command, whether that command runs neuronx-cc here)."""
    from lmi_build.runners.bundle import run_script_command
    from lmi_build.targets.neuronx.build import BUNDLE_SCRIPT, CACHE_DIR, CACHE_LAYOUT

    if (output / BUNDLE_SCRIPT).is_file():
        produced = output / (CACHE_DIR if getattr(build, "layout", None) == CACHE_LAYOUT else "compiled")
        package = _finish("neuronx", output, "--compiled-dir", str(produced))
        if _filled(produced):
            return f"the packaging of the NEFFs {BUNDLE_SCRIPT} compiled in {produced.name}/", package, False
        return (f"the compiled NEFFs ({BUNDLE_SCRIPT} has not been run; it runs on a Neuron host)",
                f"{run_script_command(output, BUNDLE_SCRIPT)} && {package}", False)
    return "the compiled NEFFs (only the plan was written)", _finish("neuronx", output), True
