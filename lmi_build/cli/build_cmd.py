"""``lmi-build trtllm``, ``lmi-build neuronx`` and ``lmi-build hf``: plan, then run the plan into an artifact.

Each command takes the knobs declared for it (``PlanRequest``'s fields, added by ``with_knobs``) plus
the build flags below, so a plan that ``lmi-build plan`` accepts is the plan that gets built.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lmi_build.cli.app import EndpointOpt
from lmi_build.cli.plan_flags import PlanFileOpt, load_plan_for, plan_request_from, with_knobs

if TYPE_CHECKING:
    from lmi_build.building.context import BuildOutcome, BuildSettings
    from lmi_build.types import TargetName

BUILD_PANEL = "Build"
# Exit status when the build stopped early because no engine toolchain is available here.
EXIT_INCOMPLETE = 3


class Until(str, Enum):
    checkpoint = "checkpoint"
    artifact = "artifact"


class RunnerChoice(str, Enum):
    local = "local"
    docker = "docker"
    script = "script"


OutputOpt = Annotated[Path, typer.Option(
    "--output", "-O", rich_help_panel=BUILD_PANEL, help="Artifact directory to create (atomically).")]
OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", rich_help_panel=BUILD_PANEL, help="Replace a non-empty --output (only after the new one verifies).")]
NoCacheOpt = Annotated[bool, typer.Option(
    "--no-cache", rich_help_panel=BUILD_PANEL, help="Neither reuse nor store a cached artifact for this plan.")]
CopyOpt = Annotated[bool, typer.Option(
    "--copy", rich_help_panel=BUILD_PANEL,
    help="Copy files into the artifact instead of hard-linking them (keeps the source untouchable).")]
KeepWorkOpt = Annotated[bool, typer.Option(
    "--keep-work", rich_help_panel=BUILD_PANEL, help="Keep the intermediate work directory (for debugging).")]
def _cache_default(value: str | None) -> str | None:
    from lmi_build.cli.user_config import cache_default

    return cache_default(value)


RemoteCacheOpt = Annotated[str | None, typer.Option(
    "--cache", rich_help_panel=BUILD_PANEL, callback=_cache_default,
    help="Shared build cache s3://bucket/prefix: reuse the artifact another host built for this plan, "
    "or store this one there. Default: cache in ~/.config/lmi-build/config.toml (--no-cache: none).")]
PublishOpt = Annotated[str | None, typer.Option(
    "--publish", rich_help_panel=BUILD_PANEL, help="Publish the verified artifact to s3://bucket/prefix.")]

UntilOpt = Annotated[Until, typer.Option(
    "--until", rich_help_panel=BUILD_PANEL,
    help="Stop after the TensorRT-LLM checkpoint (runs anywhere torch runs), or build the artifact.")]
RunnerOpt = Annotated[RunnerChoice, typer.Option(
    "--runner", rich_help_panel=BUILD_PANEL,
    help="Where the engine build runs: local (trtllm-build on PATH), docker (the profile's LMI image), "
    "script (write build-engines.sh for a GPU host; nothing runs).")]
CheckpointOpt = Annotated[Path | None, typer.Option(
    "--checkpoint", rich_help_panel=BUILD_PANEL, help="Reuse this TensorRT-LLM checkpoint instead of converting.")]
EngineDirOpt = Annotated[Path | None, typer.Option(
    "--engine-dir", rich_help_panel=BUILD_PANEL,
    help="Package engines already built (e.g. by build-engines.sh) instead of building them.")]
TimeoutOpt = Annotated[int | None, typer.Option(
    "--step-timeout", min=1, rich_help_panel=BUILD_PANEL,
    help="Seconds each vendor step may run before it is killed (default: 3 h convert, 4 h engine build).")]
ExamplesOpt = Annotated[Path | None, typer.Option(
    "--trtllm-examples", rich_help_panel=BUILD_PANEL,
    help="TensorRT-LLM examples/ checkout at the profile's tag (vendor conversion scripts only).")]

NeuronRunnerOpt = Annotated[RunnerChoice, typer.Option(
    "--runner", rich_help_panel=BUILD_PANEL,
    help="Where the NEFF compile runs: local (this host's Neuron SDK, or $LMI_BUILD_NEURON_PYTHON), docker (the "
    "profile's LMI Neuron image), script (write build-neffs.sh + plan.json for a Neuron host; nothing runs).")]
CompiledDirOpt = Annotated[Path | None, typer.Option(
    "--compiled-dir", rich_help_panel=BUILD_PANEL,
    help="Package NEFFs already compiled (the compiled/ that build-neffs.sh wrote) instead of compiling.")]
NeuronTimeoutOpt = Annotated[int | None, typer.Option(
    "--step-timeout", min=1, rich_help_panel=BUILD_PANEL,
    help="Seconds the NEFF compile may run before it is killed (default: 4 h).")]

NEURONX_EPILOG = """[bold]Examples[/bold]

  lmi-build neuronx --model meta-llama/Llama-2-7b-hf --tp 2 \\
      --n-positions 4096 --context-length-estimate 256,512,1024,2048 \\
      --runner docker --output ./out/llama2-inf2

  # write bundle/build-neffs.sh, then run it on a Neuron host:
  lmi-build neuronx --model ./llama --tp 2 --runner script --output ./bundle

Exit status: 0 done, 2 invalid plan, 1 other errors."""

TRTLLM_EPILOG = """[bold]Examples[/bold]

  lmi-build trtllm --model meta-llama/Llama-2-7b-hf --tp 2 \\
      --max-input-len 2048 --quantize awq --output ./out

  lmi-build trtllm --model demo:tiny-llama --until checkpoint --output ./ckpt

  # write bundle/build-engines.sh, then run it on a GPU host:
  lmi-build trtllm --model ./llama --runner script --output ./bundle

Exit status: 0 done, 2 invalid plan, 3 stopped after the checkpoint (no TensorRT-LLM toolchain here), 1 other errors."""

HF_EPILOG = """[bold]Examples[/bold]

  lmi-build hf --model demo:tiny-llama --quantize awq \\
      --output ./out/tiny-llama-awq

  lmi-build hf --model demo:tiny-llama --quantize awq \\
      --profile lmi-0.35.0-vllm-0.11.1 --output ./out/tiny-awq-vllm

  lmi-build hf --model mistralai/Mistral-7B-v0.1 --dtype bf16 \\
      --output ./out/mistral --publish s3://bucket/mistral/

Exit status: 0 done, 2 invalid plan, 1 other errors."""


def register(app: typer.Typer) -> None:
    app.command("trtllm", epilog=TRTLLM_EPILOG,
                help="Build TensorRT-LLM engines for the LMI TensorRT-LLM container (checkpoint on this host, "
                "engines by the profile's TensorRT-LLM).")(with_knobs(_trtllm, "trtllm"))
    app.command("neuronx", epilog=NEURONX_EPILOG,
                help="Compile NEFFs for the LMI Neuron container (transformers-neuronx, exactly as the container "
                "would) and package the precompiled layout it loads without compiling.")(with_knobs(_neuronx, "neuronx"))
    app.command("hf", epilog=HF_EPILOG,
                help="Build a Hugging Face checkpoint artifact (optionally quantized with ModelOpt).")(
                    with_knobs(_hf, "hf"))


def _trtllm(
    plan_file: PlanFileOpt = None,
    output: OutputOpt = Path("out"), until: UntilOpt = Until.artifact, runner: RunnerOpt = RunnerChoice.local,
    checkpoint: CheckpointOpt = None, engine_dir: EngineDirOpt = None, trtllm_examples: ExamplesOpt = None,
    step_timeout: TimeoutOpt = None,
    overwrite: OverwriteOpt = False, no_cache: NoCacheOpt = False, keep_work: KeepWorkOpt = False,
    copy: CopyOpt = False, publish: PublishOpt = None, endpoint_url: EndpointOpt = None,
    cache: RemoteCacheOpt = None, **knobs: Any,
) -> None:
    settings = _settings(output=output, until=until.value, runner=runner.value, checkpoint=checkpoint,
                         engine_dir=engine_dir, trtllm_examples=trtllm_examples, step_timeout_s=step_timeout,
                         overwrite=overwrite, no_cache=no_cache, keep_work=keep_work, copy=copy, publish=publish,
                         endpoint_url=endpoint_url, remote_cache=cache)
    _build("trtllm", knobs, plan_file, settings)


def _neuronx(
    plan_file: PlanFileOpt = None,
    output: OutputOpt = Path("out"), runner: NeuronRunnerOpt = RunnerChoice.local,
    compiled_dir: CompiledDirOpt = None, step_timeout: NeuronTimeoutOpt = None,
    overwrite: OverwriteOpt = False, no_cache: NoCacheOpt = False, keep_work: KeepWorkOpt = False,
    copy: CopyOpt = False, publish: PublishOpt = None, endpoint_url: EndpointOpt = None,
    cache: RemoteCacheOpt = None, **knobs: Any,
) -> None:
    settings = _settings(output=output, runner=runner.value, compiled_dir=compiled_dir, step_timeout_s=step_timeout,
                         overwrite=overwrite, no_cache=no_cache, keep_work=keep_work, copy=copy, publish=publish,
                         endpoint_url=endpoint_url, remote_cache=cache)
    _build("neuronx", knobs, plan_file, settings)


def _hf(
    plan_file: PlanFileOpt = None,
    output: OutputOpt = Path("out"), overwrite: OverwriteOpt = False, no_cache: NoCacheOpt = False,
    keep_work: KeepWorkOpt = False, copy: CopyOpt = False, publish: PublishOpt = None,
    endpoint_url: EndpointOpt = None, cache: RemoteCacheOpt = None, **knobs: Any,
) -> None:
    settings = _settings(output=output, overwrite=overwrite, no_cache=no_cache, keep_work=keep_work, copy=copy,
                         publish=publish, endpoint_url=endpoint_url, remote_cache=cache)
    _build("hf", knobs, plan_file, settings)


def _settings(*, output: Path, no_cache: bool, **how: Any) -> BuildSettings:
    from lmi_build.building.context import BuildSettings

    return BuildSettings(output=output, use_cache=not no_cache, **how)


def _build(name: TargetName, knobs: dict[str, Any], plan_file: Path | None, settings: BuildSettings) -> None:
    import dataclasses

    from lmi_build.errors import with_hint
    from lmi_build.output import current
    from lmi_build.pipeline import run_plan
    from lmi_build.planning.render import report_plan
    from lmi_build.targets import get_target

    target = get_target(name)
    inputs = tuple(path for path in (plan_file, knobs.get("properties")) if isinstance(path, Path))
    settings = dataclasses.replace(settings, inputs=inputs, plan_file=plan_file)
    saved = load_plan_for(name, plan_file, knobs, endpoint_url=settings.endpoint_url) \
        if plan_file is not None else None
    if saved is None:
        from lmi_build.planner import plan_request

        saved = plan_request(plan_request_from(knobs, target=name, endpoint_url=settings.endpoint_url), target)
    plan = saved.plan
    if not plan.valid:
        report_plan(plan)
        raise typer.Exit(2)
    out = current()
    for warning in plan.warnings:
        out.warn(with_hint(warning.message, warning.hint))
    outcome = run_plan(saved, settings, target)
    _report(outcome)
    if outcome.status == "checkpoint" and settings.until != "checkpoint":
        raise typer.Exit(EXIT_INCOMPLETE)


def _report(outcome: BuildOutcome) -> None:
    from rich.table import Table

    from lmi_build.output import current, identifier

    table = Table(title=f"lmi-build {outcome.plan.target}: {outcome.status}", show_header=True)
    table.add_column("step", no_wrap=True, overflow="fold")
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")  # model ids, paths: folded, never cut with "…"
    for step in outcome.steps:
        table.add_row(identifier(step.name), f"{step.seconds:.2f}", identifier(step.detail or ""))
    render: Any = table
    if outcome.original_steps is not None:
        from datetime import datetime

        from rich.console import Group

        # The cached artifact's own build: its steps ran then, not now.
        when = datetime.fromisoformat(outcome.original_built_at or "").strftime("%Y-%m-%d %H:%M %Z").strip()
        original = Table(title=f"original build, {when} (not run now)", show_header=True)
        original.add_column("step", no_wrap=True, overflow="fold")
        original.add_column("seconds", justify="right", no_wrap=True)
        original.add_column("detail", overflow="fold")
        for step in outcome.original_steps:
            original.add_row(identifier(step.name), f"{step.seconds:.2f}", identifier(step.detail or ""))
        render = Group(table, original)
    out = current()
    out.result(outcome.to_json(), render)
    if out.human:
        out.info(f"{outcome.message}: {outcome.output}")
        if outcome.published:
            out.info(f"published to {outcome.published['url']}")
        if outcome.next_command:
            where = f" ({outcome.next_host})" if outcome.next_host else ""
            out.info(f"next{where}: {outcome.next_command}")
