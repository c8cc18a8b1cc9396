"""Runs a validated plan: source -> steps -> artifact -> (cache) -> (publish).

The plan decides everything; this module only executes it. Each target contributes one function
that turns the fetched model into the directory its layout packages (``produced``). Nothing is
written to the output directory until the packager has verified the staged artifact.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lmi_build.artifact.manifest import BuildRecord, HardwareTarget, StepTiming
from lmi_build.errors import InvalidPlan, SourceError, UnsupportedTarget
from lmi_build.output import current
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.request import PlanRequest
from lmi_build.sources.base import ResolvedSource

if TYPE_CHECKING:
    from lmi_build.trtllm.profile_schema import ContainerProfile
    from lmi_build.trtllm.runners import Paths
    from lmi_build.trtllm.steps import Step

RunnerKind = Literal["local", "docker", "script"]
Until = Literal["checkpoint", "artifact"]
Status = Literal["artifact", "cached", "checkpoint", "script"]


@dataclass(frozen=True)
class BuildSettings:
    """How to run a plan (never what to build: that is the plan's job)."""

    output: Path
    until: Until = "artifact"
    runner: RunnerKind = "local"
    overwrite: bool = False
    use_cache: bool = True
    keep_work: bool = False
    copy: bool = False  # copy files into the artifact instead of hard-linking them
    checkpoint: Path | None = None  # trtllm: reuse this TensorRT-LLM checkpoint
    engine_dir: Path | None = None  # trtllm: package engines built elsewhere (e.g. by the script)
    trtllm_examples: Path | None = None  # trtllm vendor route: a TensorRT-LLM checkout at the profile's tag
    step_timeout_s: int | None = None  # overrides each vendor step's own timeout
    publish: str | None = None
    endpoint_url: str | None = None


@dataclass
class BuildOutcome:
    plan: BuildPlan
    status: Status
    output: Path
    steps: list[StepTiming] = field(default_factory=list)
    next_command: str | None = None  # what finishes the job when it stopped early
    message: str = ""
    published: dict[str, Any] | None = None
    stand_in: bool = False  # the engines came from a test stand-in, not TensorRT-LLM

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "output": str(self.output),
            "target": self.plan.target,
            "cache_key": self.plan.cache_key,
            "steps": [step.model_dump(mode="json") for step in self.steps],
            "next_command": self.next_command,
            "message": self.message,
            "published": self.published,
            "stand_in": self.stand_in,
        }


@dataclass
class _Build:
    """What a target's build function needs and leaves behind."""

    plan: BuildPlan
    request: PlanRequest
    settings: BuildSettings
    source: ResolvedSource
    work: Path
    record: BuildRecord
    layout: str = ""
    produced: Path | None = None
    stopped: BuildOutcome | None = None  # set when the target stops before an artifact
    stand_in: bool = False


def model_ref(plan: BuildPlan, request: PlanRequest) -> str:
    ref = request.model or plan.options.get("option.model_id")
    if not ref:
        raise SourceError("no model given", hint="pass --model (a directory, HF id, s3:// URL or demo:NAME)")
    return ref


def run_plan(plan: BuildPlan, request: PlanRequest, settings: BuildSettings) -> BuildOutcome:
    """Execute ``plan`` and return what was produced."""
    if not plan.valid:
        raise InvalidPlan("the plan has errors; nothing was built", hint="run `lmi-build plan` to see them")
    builder = _TARGET_BUILDERS.get(plan.target)
    if builder is None:
        raise UnsupportedTarget(f"lmi-build cannot build target '{plan.target}' yet",
                                hint=f"buildable targets: {', '.join(sorted(_TARGET_BUILDERS))}; "
                                "`lmi-build plan` still validates the others")
    output = settings.output.absolute()
    from lmi_build.artifact.packager import check_output

    check_output(output, settings.overwrite)  # before any work, not after an hour of it
    if settings.publish is not None:
        _check_publish_target(settings)
    if settings.until == "artifact" and settings.use_cache:
        cached = _from_cache(plan, output, settings)
        if cached is not None:
            return _maybe_publish(cached, settings)

    record = BuildRecord()
    with record.timed("fetch", detail=model_ref(plan, request)):
        source = _fetch(plan, request, settings)
    output.parent.mkdir(parents=True, exist_ok=True)
    # The work directory sits beside the output so produced files can be hard-linked into it.
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.work-", dir=output.parent))
    try:
        build = _Build(plan=plan, request=request, settings=settings, source=source, work=work, record=record)
        builder(build)
        if build.stopped is not None:
            return build.stopped
        assert build.produced is not None  # a builder either stops or produces
        from lmi_build.artifact.packager import package

        package(plan, layout=build.layout, produced=build.produced, source_dir=source.path,
                output_dir=output, record=record, overwrite=settings.overwrite, copy=settings.copy)
        outcome = BuildOutcome(plan=plan, status="artifact", output=output, steps=_steps_of(output),
                               stand_in=build.stand_in,
                               message="artifact built from STAND-IN engines (not a real TensorRT-LLM build)"
                               if build.stand_in else "artifact built and verified")
        if settings.use_cache and not build.stand_in:
            _store_in_cache(plan, output)
        return _maybe_publish(outcome, settings)
    finally:
        if settings.keep_work:
            current().info(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _fetch(plan: BuildPlan, request: PlanRequest, settings: BuildSettings) -> ResolvedSource:
    from lmi_build.sources.resolve import resolve_source

    source = resolve_source(model_ref(plan, request), purpose="build", revision=request.revision,
                            allow_pickle=request.allow_pickle, endpoint_url=settings.endpoint_url)
    planned, fetched = plan.model, source.identity
    if planned.revision and fetched.revision and planned.revision != fetched.revision:
        raise SourceError(f"the model changed between planning and fetching (revision {planned.revision} -> "
                          f"{fetched.revision})", hint="pin --revision and run again")
    return source


# ---- hf: a Hugging Face checkpoint, converted or quantized when the plan says so ----

def _build_hf(build: _Build) -> None:
    from lmi_build.planning.plan import HfBuild

    plan = build.plan
    assert isinstance(plan.build, HfBuild)
    build.layout = "hf"
    needs_step = plan.quantization.method is not None or plan.spec.torch_dtype != plan.build.dtype
    if not needs_step:
        build.produced = build.source.path
        return
    from lmi_build.quantize.export import run_checkpoint_step

    detail = plan.quantization.quant_algo or f"dtype {plan.build.dtype}"
    with build.record.timed("quantize" if plan.quantization.method else "convert", detail=detail):
        result = run_checkpoint_step(plan, build.source.path, build.work, calib_file=build.request.calib_data)
    build.produced = result.out_dir


# ---- trtllm: checkpoint on this host, engines by the profile's TensorRT-LLM ----

def _build_trtllm(build: _Build) -> None:
    from lmi_build.planning.plan import TrtllmBuild
    from lmi_build.trtllm.engine_check import check_engine_dir, gpu_sm
    from lmi_build.trtllm.layouts import layout_name
    from lmi_build.trtllm.profiles import get_profile
    from lmi_build.trtllm.runners import Paths, make_runner, toolchain_available
    from lmi_build.trtllm.steps import engine_steps

    plan, settings, out = build.plan, build.settings, current()
    assert isinstance(plan.build, TrtllmBuild)
    profile = get_profile(plan.toolchain.profile)
    build.layout = layout_name(profile.layout)
    checkpoint = settings.checkpoint.absolute() if settings.checkpoint else build.work / "checkpoint"
    engine = settings.engine_dir.absolute() if settings.engine_dir else build.work / "engine"
    paths = Paths(model=build.source.path, checkpoint=checkpoint, engine=engine,
                  examples=settings.trtllm_examples.absolute() if settings.trtllm_examples else None)

    if settings.engine_dir is None:
        steps = engine_steps(plan, profile)
        if settings.step_timeout_s is not None:
            steps = [step.model_copy(update={"timeout_s": settings.step_timeout_s}) for step in steps]
        host = [s for s in steps if s.python_call is not None and settings.checkpoint is None]
        vendor = [s for s in steps if s.python_call is None]
        for step in host:  # ModelOpt runs here whatever the engine runner is
            with build.record.timed(step.name, detail=plan.quantization.quant_algo or "ModelOpt export"):
                _run_host_step(step, build, paths)
        if settings.until == "checkpoint":
            build.stopped = _stop_with_checkpoint(build, profile, checkpoint, "checkpoint written (--until checkpoint)")
            return
        if settings.runner == "script":
            build.stopped = _write_script(build, vendor, paths, profile)
            return
        available, why = toolchain_available(settings.runner, profile, vendor)
        if not available:
            build.stopped = _stop_with_checkpoint(build, profile, checkpoint, f"no TensorRT-LLM toolchain here: {why}")
            return
        runner = make_runner(settings.runner, profile)
        for step in vendor:
            result = runner.run(step, paths, build.work, plan)
            build.record.steps.append(StepTiming(name=step.name, seconds=result.seconds, detail=f"{runner.kind} runner"))
        _keep_logs(build.work, engine)

    info = check_engine_dir(engine, profile, world_size=plan.build.world_size)
    sm, name = gpu_sm()
    build.record.hardware = HardwareTarget(gpu_sm=sm, gpu_name=name)
    build.record.toolchain = {"tensorrt_llm": info.version}
    if info.stand_in:
        build.record.toolchain["stand_in"] = "true"
        out.warn("the engine directory was written by a STAND-IN trtllm-build: this is not a real engine")
    build.stand_in = info.stand_in
    build.produced = engine


def _run_host_step(step: Step, build: _Build, paths: Paths) -> None:
    """A step implemented in Python on this host (the ModelOpt checkpoint export). Called here,
    not through a runner, because it also needs the user's calibration file again: the plan only
    records its name and digest, and the step refuses a file that changed since planning."""
    import importlib

    assert step.python_call is not None
    module_name, _, function_name = step.python_call.partition(":")
    export = getattr(importlib.import_module(module_name), function_name)
    export(build.plan, paths.model, paths.checkpoint, calib_file=build.request.calib_data)


def _keep_logs(work: Path, engine: Path) -> None:
    """The vendor tools' logs travel with the artifact (the layouts carry build-logs/ from here)."""
    from lmi_build.trtllm.runners import LOG_DIR

    logs = work / LOG_DIR
    if logs.is_dir():
        shutil.copytree(logs, engine / LOG_DIR, dirs_exist_ok=True)


def _stop_with_checkpoint(build: _Build, profile: ContainerProfile, checkpoint: Path, reason: str) -> BuildOutcome:
    from lmi_build.artifact.packager import install_directory
    from lmi_build.trtllm.runners import finish_command

    output = build.settings.output.absolute()
    if build.settings.checkpoint is None:
        install_directory(checkpoint, output, overwrite=build.settings.overwrite)
        checkpoint = output
    # With --checkpoint nothing new was written: the checkpoint stays where the user has it.
    finish = finish_command(build.plan, profile, checkpoint=checkpoint, output=output,
                            model_ref=model_ref(build.plan, build.request))
    return BuildOutcome(plan=build.plan, status="checkpoint", output=checkpoint, steps=list(build.record.steps),
                        next_command=finish, message=f"stopped after the TensorRT-LLM checkpoint: {reason}")


def _write_script(build: _Build, steps: list[Step], paths: Paths, profile: ContainerProfile) -> BuildOutcome:
    """--runner script: the checkpoint plus a shell script that builds the engines on a GPU host."""
    from lmi_build.artifact.packager import install_directory, link_or_copy
    from lmi_build.trtllm.runners import Paths, ScriptRunner

    output = build.settings.output.absolute()
    bundle = build.work / "bundle"
    bundle.mkdir()
    if build.settings.checkpoint is None:
        shutil.move(str(paths.checkpoint), bundle / "checkpoint")
    else:  # the bundle must be self-contained: link (or copy) the user's checkpoint into it
        shutil.copytree(paths.checkpoint, bundle / "checkpoint",
                        copy_function=lambda src, dst: link_or_copy(Path(src), Path(dst)))
    runner = ScriptRunner(image=profile.image)
    for step in steps:
        runner.run(step, paths, build.work, build.plan)
    relative = Paths(model=paths.model, checkpoint=Path("checkpoint"), engine=Path("engine"),
                     examples=paths.examples)
    script = bundle / "build-engines.sh"
    script.write_text(runner.script(relative, header=f"profile {profile.name}; plan {build.plan.cache_key}"),
                      encoding="utf-8")
    script.chmod(0o755)
    (bundle / "plan.json").write_text(_plan_json(build.plan), encoding="utf-8")
    install_directory(bundle, output, overwrite=build.settings.overwrite)
    ref = model_ref(build.plan, build.request)
    package_cmd = (f"lmi-build trtllm --model {ref} --profile {profile.name} --engine-dir {output}/engine "
                   f"--output {output}-artifact")
    return BuildOutcome(plan=build.plan, status="script", output=output, steps=list(build.record.steps),
                        next_command=f"(cd {output} && ./build-engines.sh) && {package_cmd}",
                        message="checkpoint and engine-build script written; run the script on a GPU host")


def _plan_json(plan: BuildPlan) -> str:
    import json

    return json.dumps(plan.to_json(), indent=2) + "\n"


_TARGET_BUILDERS: dict[str, Callable[[_Build], None]] = {"hf": _build_hf, "trtllm": _build_trtllm}


# ---- the config-aware artifact cache ----

def _from_cache(plan: BuildPlan, output: Path, settings: BuildSettings) -> BuildOutcome | None:
    from lmi_build.artifact.cache import ArtifactCache

    hit = ArtifactCache().restore(plan.cache_key, output, overwrite=settings.overwrite)
    if hit is None:
        return None
    return BuildOutcome(plan=plan, status="cached", output=output, steps=_steps_of(output),
                        message=f"reused the cached artifact for {plan.cache_key[:19]}… (verified)")


def _store_in_cache(plan: BuildPlan, output: Path) -> None:
    from lmi_build.artifact.cache import ArtifactCache

    ArtifactCache().store(plan.cache_key, output)


def _steps_of(artifact: Path) -> list[StepTiming]:
    from lmi_build.artifact.manifest import load_manifest

    return list(load_manifest(artifact).steps)


def _check_publish_target(settings: BuildSettings) -> None:
    """A wrong bucket, endpoint or missing credentials must fail before the build, not after it."""
    from lmi_build.storage.client import check_bucket, endpoint_label, s3_client
    from lmi_build.storage.s3url import parse_s3_url

    assert settings.publish is not None
    target = parse_s3_url(settings.publish)
    check_bucket(s3_client(settings.endpoint_url), target, endpoint_label(settings.endpoint_url))


def _maybe_publish(outcome: BuildOutcome, settings: BuildSettings) -> BuildOutcome:
    if settings.publish is None:
        return outcome
    if outcome.stand_in:
        raise UnsupportedTarget("refusing to publish an artifact built from STAND-IN engines",
                                hint="build with the real TensorRT-LLM toolchain")
    from lmi_build.storage.publish import publish

    summary = publish(outcome.output, settings.publish, endpoint_url=settings.endpoint_url)
    outcome.published = {"url": settings.publish, **summary.model_dump(mode="json")}
    return outcome
