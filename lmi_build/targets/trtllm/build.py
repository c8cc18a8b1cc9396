"""Build the ``trtllm`` target: the checkpoint on this host (ModelOpt) or in the container (vendor
scripts), then ``trtllm-build`` through the shared runners; or stop early with the saved plan and
the exact command that finishes the job on a GPU host."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from lmi_build.artifact.manifest import HardwareTarget, StepTiming
from lmi_build.artifact.packager import install_directory
from lmi_build.building.context import BuildContext, BuildOutcome, BuildSettings
from lmi_build.building.run_settings import narrowed
from lmi_build.building.target import Unfinished
from lmi_build.core.errors import LmiBuildError, OptionError, SourceError, StepError
from lmi_build.planning.gpus import sm_requirements
from lmi_build.planning.instances import get_instance
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import PLAN_FILE, SavedPlan
from lmi_build.reporting import events
from lmi_build.reporting.output import current
from lmi_build.runners import LOG_DIR, Paths, Step, make_runner
from lmi_build.runners.bundle import (
    Requirement,
    finished_output,
    gpu_requirement,
    run_script_command,
    write_bundle,
)
from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint
from lmi_build.targets.trtllm.command import TrtllmRun
from lmi_build.targets.trtllm.engine_check import check_engine_dir, gpu_sm, read_engine_config
from lmi_build.targets.trtllm.engine_match import engine_mismatches, expectation_from_plan
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.layouts import layout_for
from lmi_build.targets.trtllm.profiles import ContainerProfile, get_profile
from lmi_build.targets.trtllm.steps import (
    BUNDLE_SCRIPT,
    DEFAULT_EXAMPLES,
    GPTQ_FILE,
    engine_bundle,
    engine_steps,
    trtllm_paths,
)
from lmi_build.targets.trtllm.toolchain import toolchain_available

BUNDLE_CHECKPOINT = "checkpoint"
BUNDLE_ENGINE = "engine"
BUNDLE_MODEL = "model"


def preflight(saved: SavedPlan, settings: BuildSettings) -> None:
    """A --checkpoint must be this plan's, an --engine-dir must exist: checked before any work."""
    run = narrowed(settings.run, TrtllmRun)
    if run.checkpoint is not None:
        profile = get_profile(saved.plan.toolchain.profile)
        check_checkpoint(run.checkpoint.absolute(), saved.plan, legacy=profile.workflow == "legacy")
    if run.engine_dir is not None and not run.engine_dir.is_dir():
        raise SourceError(f"--engine-dir {run.engine_dir} is not a directory",
                          hint="give the engine directory build-engines.sh or trtllm-build wrote")


def build(ctx: BuildContext) -> None:
    plan, run = ctx.plan, narrowed(ctx.settings.run, TrtllmRun)
    knobs = plan.knobs(TrtllmBuild)
    profile = get_profile(plan.toolchain.profile)
    ctx.layout = layout_for(profile.layout)
    checkpoint = run.checkpoint.absolute() if run.checkpoint else ctx.work / BUNDLE_CHECKPOINT
    engine = run.engine_dir.absolute() if run.engine_dir else ctx.work / BUNDLE_ENGINE
    paths = trtllm_paths(model=ctx.source.path, checkpoint=checkpoint, engine=engine,
                         examples=run.trtllm_examples.absolute() if run.trtllm_examples else None)
    if run.engine_dir is None:
        stopped = _run_steps(ctx, run, profile, paths, checkpoint)
        if stopped is not None:
            ctx.stopped = stopped
            return
        _keep_logs(ctx.work, engine)
    info = check_engine_dir(engine, profile, world_size=knobs.world_size)
    _check_engine_is_the_plans(engine, plan)
    sm, name = gpu_sm()
    ctx.record.hardware = HardwareTarget(gpu_sm=sm, gpu_name=name)
    ctx.record.toolchain = {"tensorrt_llm": info.version}
    if info.stand_in:
        ctx.record.toolchain["stand_in"] = "true"
        current().warn("the engine directory was written by a STAND-IN trtllm-build: this is not a real engine")
    ctx.stand_in = info.stand_in
    ctx.produced = engine


def _run_steps(ctx: BuildContext, run: TrtllmRun, profile: ContainerProfile, paths: Paths,
               checkpoint: Path) -> BuildOutcome | None:
    """The plan's steps: ModelOpt's checkpoint here, the vendor's in the engine runner; the outcome of a
    build that stops before the engines (--until checkpoint, --runner script, no toolchain here)."""
    if run.checkpoint is None:
        _check_prequantized_file(ctx.plan, ctx.source.path)
    steps = engine_steps(ctx.plan, profile)
    if run.step_timeout_s is not None:
        steps = [step.model_copy(update={"timeout_s": run.step_timeout_s}) for step in steps]
    vendor = [s for s in steps if s.in_process is None]
    for step in steps:  # ModelOpt runs here whatever the engine runner is
        if step.in_process is not None and run.checkpoint is None:
            _export_checkpoint(ctx, paths, step.name)
    if run.until == "checkpoint":
        return _stop_with_checkpoint(ctx, profile, checkpoint, "checkpoint written (--until checkpoint)", vendor)
    if run.runner == "script":
        return _write_script(ctx, vendor, paths, profile)
    available, why = toolchain_available(run.runner, profile, vendor)
    if not available:
        return _stop_with_checkpoint(ctx, profile, checkpoint, f"no TensorRT-LLM toolchain here: {why}", vendor)
    runner = make_runner(run.runner, image=profile.image)
    for step in vendor:
        with events.step(step.name, detail=f"{runner.kind} runner"):
            result = runner.run(step, paths, ctx.work, ctx.plan)
        ctx.record.steps.append(StepTiming(name=step.name, seconds=result.seconds, detail=f"{runner.kind} runner"))
    return None


def check_checkpoint(directory: Path, plan: BuildPlan, *, legacy: bool = False) -> None:
    """Refuse a ``--checkpoint`` that is not the one this plan converts: its architecture, dtype,
    world size and quantization must be the plan's (checked before any work)."""
    build = plan.knobs(TrtllmBuild)
    if not directory.is_dir():
        raise SourceError(f"--checkpoint {directory} is not a directory",
                          hint="give the directory `lmi-build trtllm --until checkpoint` wrote")
    config_path = directory / "config.json"
    if not config_path.is_file():
        if legacy:  # 0.7.x checkpoints are the vendor scripts' own formats: no config.json to compare
            return
        raise SourceError(f"--checkpoint {directory} has no config.json: not a TensorRT-LLM checkpoint",
                          hint="give the directory `lmi-build trtllm --until checkpoint` wrote")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        mapping = config.get("mapping") or {}
        quantization = config.get("quantization") or {}
        world = int(mapping.get("world_size") or int(mapping.get("tp_size", 1)) * int(mapping.get("pp_size", 1)))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise SourceError(f"--checkpoint {directory}: config.json is unreadable ({error})",
                          hint="give the directory `lmi-build trtllm --until checkpoint` wrote") from None
    expected = {
        "architecture": (config.get("architecture"), build.trtllm_architecture),
        "dtype": (config.get("dtype"), build.dtype),
        "world size": (world, build.world_size),
        "tp": (int(mapping.get("tp_size", world)), build.tp),
        "quant_algo": (quantization.get("quant_algo"), plan.quantization.quant_algo),
        "kv_cache_quant_algo": (quantization.get("kv_cache_quant_algo"), plan.quantization.kv_cache_quant_algo),
    }
    mismatches = [f"{what} {found} (the plan has {wanted})" for what, (found, wanted) in expected.items()
                  if (wanted is not None and found != wanted) or (wanted is None and what.endswith("quant_algo")
                  and found is not None)]
    if mismatches:
        raise SourceError(f"--checkpoint {directory} is not this plan's checkpoint: " + "; ".join(mismatches),
                          hint="convert it again for this plan (drop --checkpoint), or plan for that checkpoint")


def _check_engine_is_the_plans(engine: Path, plan: BuildPlan) -> None:
    """The engine must be what serving.properties will say (lengths, batch, block size, plugins,
    quantization, world size): an --engine-dir built for another plan is refused, naming both sides."""
    mismatches = engine_mismatches(read_engine_config(engine), expectation_from_plan(plan))
    if mismatches:
        raise StepError(f"engine {engine} was not built for this plan: " + "; ".join(mismatches),
                        hint="rebuild the engine with this plan's build-engines.sh, or plan for that engine")


def _check_prequantized_file(plan: BuildPlan, model: Path) -> None:
    """The vendor converter reads a pre-quantized GPTQ model from ONE .safetensors file (steps.GPTQ_FILE):
    refuse a model that does not have it before anything runs, naming what it has instead."""
    pre = plan.quantization.pre_quantized
    if pre is None or pre.method != "gptq" or (model / GPTQ_FILE).is_file():
        return
    found = sorted(p.name for p in model.glob("*.safetensors"))
    raise SourceError(f"TensorRT-LLM converts a pre-quantized GPTQ model from one {GPTQ_FILE}; {model} has "
                      f"{', '.join(found) or 'no .safetensors file'}",
                      hint=f"save the quantized model as a single {GPTQ_FILE} (AutoGPTQ save_quantized, "
                           "max_shard_size large enough), or start from the unquantized model")


def _export_checkpoint(ctx: BuildContext, paths: Paths, step: str) -> None:
    """The ModelOpt checkpoint step, timed and recorded, run here whatever the engine runner is (never by a
    runner: it also needs the user's calibration file; the plan records only its name and digest, and the
    step refuses a file that changed since planning)."""
    model, checkpoint = paths.get("model"), paths.get("checkpoint")
    assert model is not None and checkpoint is not None  # trtllm_paths always names both
    estimate = ctx.plan.checkpoint_step.seconds if ctx.plan.checkpoint_step is not None else None
    with ctx.record.timed(step, detail=ctx.plan.quantization.quant_algo or "unquantized", estimate_s=estimate):
        exported = build_trtllm_checkpoint(ctx.plan, model, checkpoint, calib_file=ctx.inputs.calib_data,
                                           layout_cache=ctx.settings.use_cache)
    ctx.record.record_checkpoint(step, exported)


def _keep_logs(work: Path, engine: Path) -> None:
    """The vendor tools' logs travel with the artifact (the layouts carry build-logs/ from here)."""
    logs = work / LOG_DIR
    if logs.is_dir():
        shutil.copytree(logs, engine / LOG_DIR, dirs_exist_ok=True)


def finish_command(plan_file: Path, *, output: Path, checkpoint: Path | None = None,
                   engine_dir: Path | None = None, runner: str | None = None, examples: str | None = None) -> str:
    """``lmi-build trtllm --plan ...``: the command that finishes a build stopped early, shell-quoted."""
    parts = ["lmi-build", "trtllm", "--plan", str(plan_file)]
    if checkpoint is not None:
        parts += ["--checkpoint", str(checkpoint)]
    if engine_dir is not None:
        parts += ["--engine-dir", str(engine_dir)]
    if runner is not None:
        parts += ["--runner", runner]
    if examples is not None:
        parts += ["--trtllm-examples", examples]
    parts += ["--output", str(output)]
    return shlex.join(parts)


def container_conversion(steps: list[Step], version: str) -> str | None:
    """The vendor conversion a GPU host must run before trtllm-build, in words (None: nothing to convert)."""
    scripts = [step.argv[1].replace("{examples}", "examples") for step in steps
               if step.where == "container" and len(step.argv) > 1 and step.argv[1].startswith("{examples}/")]
    if not scripts:
        return None
    return f"{' then '.join(scripts)} of TensorRT-LLM {version}"


def _host_needs(profile: ContainerProfile, runner: str) -> str:
    """Where the finishing command of a stopped build runs, in words."""
    if runner == "docker":
        return (f"run it on a GPU host with Docker and the NVIDIA container runtime (it runs {profile.image}), "
                "or add --runner script for a bundle to run there")
    return (f"run it on a GPU host with TensorRT-LLM {profile.tensorrt_llm} (trtllm-build and nvidia-smi on PATH, "
            "e.g. inside the profile's image), or add --runner docker (a GPU host with Docker) or --runner script "
            "(a bundle to run there)")


def _stop_with_checkpoint(ctx: BuildContext, profile: ContainerProfile, checkpoint: Path,
                          reason: str, vendor: list[Step]) -> BuildOutcome:
    """Exit 3 or --until checkpoint: the checkpoint (with plan.json beside its config.json) goes
    to --output; with --checkpoint the user's directory stays as it is and --output gets plan.json.
    A build of a saved plan (--plan) that has nothing but that plan to leave writes nothing: its
    finishing command is the same plan's, with the same --output."""
    run = narrowed(ctx.settings.run, TrtllmRun)
    output = ctx.settings.output.absolute()
    converted_here = run.checkpoint is None and checkpoint.is_dir()
    if run.until == "checkpoint" and run.checkpoint is None and not converted_here:
        raise LmiBuildError(
            f"this plan's checkpoint is converted by TensorRT-LLM {profile.tensorrt_llm}'s own scripts in the "
            "container, so there is no checkpoint to stop after",
            hint="build with --runner docker on a GPU host, or --runner script for a bundle that converts there",
            code="checkpoint_in_container")
    conversion = container_conversion(vendor, profile.tensorrt_llm) if run.checkpoint is None else None
    if conversion is not None and not converted_here:
        reason += f"; the GPU host must run {conversion} (a checkout at that tag: --trtllm-examples)"
    if converted_here:
        what = "stopped after the TensorRT-LLM checkpoint"
        plan_file, stopped_at, finished = _stop_output(ctx, checkpoint, output)
    elif ctx.settings.plan_file is not None:
        what = f"stopped before {'trtllm-build' if run.checkpoint else 'any TensorRT-LLM step'}; nothing written"
        plan_file = ctx.settings.plan_file.absolute()
        stopped_at, finished = plan_file.parent, output  # --output is still free for the artifact
    else:
        what = (f"stopped before {'trtllm-build' if run.checkpoint else 'any TensorRT-LLM step'}; "
                "only plan.json was written")
        staged = ctx.work / "plan-only"
        staged.mkdir()
        plan_file, stopped_at, finished = _stop_output(ctx, staged, output)
    finished_from = output if converted_here else run.checkpoint
    # The same runner the user chose: run as printed on a host that has what that runner needs.
    runner = run.runner if run.runner != "local" else None
    examples = None
    if conversion is not None and not converted_here:
        examples = str(run.trtllm_examples.absolute()) if run.trtllm_examples else DEFAULT_EXAMPLES
    finish = finish_command(plan_file, checkpoint=finished_from.absolute() if finished_from else None,
                            runner=runner, output=finished, examples=examples)
    return BuildOutcome(plan=ctx.plan, status="checkpoint", output=stopped_at, steps=list(ctx.record.steps),
                        next_command=finish, next_host=_host_needs(profile, run.runner),
                        message=f"{what}: {reason}")


def _stop_output(ctx: BuildContext, staged: Path, output: Path) -> tuple[Path, Path, Path]:
    """plan.json into ``staged``, installed as --output: (its plan file, where it lies, the artifact's place)."""
    ctx.saved.save(staged / PLAN_FILE)
    install_directory(staged, output, overwrite=ctx.settings.overwrite)
    return output / PLAN_FILE, output, finished_output(output)


def plan_gpu(plan: BuildPlan) -> Requirement:
    """The GPU a bundle's host must have: the SM of the plan's instance type (engines run only on the
    SM they are built on), else the SM its quantization needs, else any GPU."""
    name = plan.memory.instance_type if plan.memory is not None else None
    if name:
        try:
            sm = get_instance(name).accelerator.sm
        except OptionError:
            sm = None
        if sm:
            return gpu_requirement(sm, why=f"the plan's instance type {name}")
    needs = sm_requirements(plan.quantization.quant_algo, plan.quantization.kv_cache_quant_algo)
    if needs:
        what, minimum = max(needs, key=lambda need: need[1])
        return gpu_requirement(minimum=minimum, why=f"{what} quantization")
    return gpu_requirement()


def _write_script(ctx: BuildContext, steps: list[Step], paths: Paths, profile: ContainerProfile) -> BuildOutcome:
    """--runner script: plan.json, build-engines.sh and what its steps read (the model when the GPU
    host converts it, else the checkpoint converted here) in one bundle; the script builds the
    engines on a GPU host and the finishing command packages them with exactly this plan."""
    output = ctx.settings.output.absolute()
    bundle = ctx.work / "bundle"
    bundle.mkdir()
    checkpoint = paths.get("checkpoint")
    assert checkpoint is not None
    linked: dict[str, Path] = {}
    if narrowed(ctx.settings.run, TrtllmRun).checkpoint is None:
        if checkpoint.is_dir():  # the vendor route converts on the GPU host: no checkpoint here yet
            shutil.move(str(checkpoint), bundle / BUNDLE_CHECKPOINT)
    else:  # the bundle must be self-contained: link (or copy) the user's checkpoint into it
        linked[BUNDLE_CHECKPOINT] = checkpoint
    if any("model" in step.inputs for step in steps):  # the GPU host converts: the model travels too
        linked[BUNDLE_MODEL] = ctx.source.path
    relative = paths.replace(model=Path(BUNDLE_MODEL), checkpoint=Path(BUNDLE_CHECKPOINT), engine=Path(BUNDLE_ENGINE))
    spec = engine_bundle(profile.image, tensorrt_llm=profile.tensorrt_llm, gpu=plan_gpu(ctx.plan),
                         header=f"profile {profile.name}; plan {ctx.plan.cache_key}")
    package = finish_command(output / PLAN_FILE, engine_dir=output / BUNDLE_ENGINE, output=finished_output(output))
    next_command = write_bundle(spec, steps, relative, bundle=bundle, saved=ctx.saved, output=output,
                                overwrite=ctx.settings.overwrite, package=package, linked=linked)
    return BuildOutcome(plan=ctx.plan, status="script", output=output, steps=list(ctx.record.steps),
                        next_command=next_command, message=_script_message(steps, profile),
                        next_host=f"the script on a GPU host: ./{BUNDLE_SCRIPT} --check lists what that host lacks; "
                                  "the packaging where lmi-build is")


def _script_message(steps: list[Step], profile: ContainerProfile) -> str:
    """What the bundle holds and, when the GPU host converts, what it needs there besides the bundle."""
    conversion = container_conversion(steps, profile.tensorrt_llm)
    if conversion is None:
        return "checkpoint, plan.json and engine-build script written; run the script on a GPU host"
    return (f"model, plan.json and engine-build script written; on the GPU host the script runs {conversion}: "
            f"set TRTLLM_EXAMPLES to the checkout's examples/ (default {DEFAULT_EXAMPLES})")


# Where a finishing command that runs trtllm-build works (verify's word on an unfinished output).
WHERE = ("run it where trtllm-build and a GPU are, or add --runner docker (a GPU host with Docker) or "
         "--runner script (a bundle to run there)")


def unfinished(output: Path) -> Unfinished:
    """What ``output`` (a checkpoint or plan left by exit 3, or a --runner script bundle) lacks, and the
    command that finishes it: the one the build printed as ``next:``."""
    def finish(*, checkpoint: Path | None = None, engine_dir: Path | None = None) -> str:
        return finish_command(output / PLAN_FILE, output=finished_output(output), checkpoint=checkpoint,
                              engine_dir=engine_dir)

    engine = output / BUNDLE_ENGINE
    if (output / BUNDLE_SCRIPT).is_file():
        package = finish(engine_dir=engine)
        if engine.is_dir() and any(engine.iterdir()):
            return Unfinished(f"the packaging of the engines {BUNDLE_SCRIPT} built in {BUNDLE_ENGINE}/", package,
                              bundle=True)
        return Unfinished(f"the TensorRT-LLM engines ({BUNDLE_SCRIPT} has not been run; it runs on a GPU host)",
                          f"{run_script_command(output, BUNDLE_SCRIPT)} && {package}", bundle=True)
    if (output / "config.json").is_file():
        return Unfinished("the TensorRT-LLM engines (the build stopped after the checkpoint: no TensorRT-LLM "
                          "toolchain where it ran)", finish(checkpoint=output), WHERE)
    return Unfinished("the checkpoint and the TensorRT-LLM engines (only the plan was written)", finish(), WHERE)
