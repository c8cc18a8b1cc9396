"""``lmi-build <target>`` (``trtllm``, ``neuronx``, ``hf``: one command per target of the registry): plan,
then run the plan into an artifact.

Each command takes the flags every build takes (below), its target's own (the build flags of its run
settings, ``Target.command``) and the knobs declared for it (``PlanRequest``'s fields, added by
``with_knobs``), so a plan that ``lmi-build plan`` accepts is the plan that gets built.
"""

import inspect
import time
import typing
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from lmi_build.artifact.manifest import StepTiming
from lmi_build.building.context import BuildOutcome, BuildSettings
from lmi_build.building.pipeline import run_plan
from lmi_build.building.target import Target
from lmi_build.cli import build_summary
from lmi_build.cli.app import EndpointOpt, with_events_option
from lmi_build.cli.plan_flags import PlanFileOpt, load_plan_for, plan_request_from, with_knobs
from lmi_build.cli.user_config import cache_default
from lmi_build.core.errors import LmiBuildError, with_hint
from lmi_build.planner.make import plan_request
from lmi_build.planning.render import report_plan
from lmi_build.reporting import events
from lmi_build.reporting.output import current, identifier
from lmi_build.targets import TARGETS

BUILD_PANEL = "Build"
# Exit status when the build stopped early because no engine toolchain is available here.
EXIT_INCOMPLETE = 3

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
    return cache_default(value)  # typer calls back with the value alone


RemoteCacheOpt = Annotated[str | None, typer.Option(
    "--cache", rich_help_panel=BUILD_PANEL, callback=_cache_default,
    help="Shared build cache s3://bucket/prefix: reuse the artifact another host built for this plan, "
    "or store this one there. Default: cache in ~/.config/lmi-build/config.toml (--no-cache: none).")]
PublishOpt = Annotated[str | None, typer.Option(
    "--publish", rich_help_panel=BUILD_PANEL, help="Publish the verified artifact to s3://bucket/prefix.")]


def register(app: typer.Typer) -> None:
    for target in TARGETS.values():
        app.command(target.name, help=target.command.help, epilog=target.command.epilog)(
            with_events_option(with_knobs(build_command(target), target.name)))


def build_command(target: Target) -> Callable[..., None]:
    """``lmi-build <target>``: the flags every build takes, with the target's own (its run settings'
    build flags) after --output; ``with_knobs`` adds the knobs."""
    run_settings = target.command.settings
    hints = typing.get_type_hints(run_settings)
    own = [inspect.Parameter(declared.name, inspect.Parameter.KEYWORD_ONLY, default=declared.default,
                             annotation=Annotated[hints[declared.name], typer.Option(
                                 how.flag, min=how.min, rich_help_panel=BUILD_PANEL, help=how.help)])
           for declared, how in run_settings.flag_fields()]

    def build(*, plan_file: Path | None, output: Path, overwrite: bool, no_cache: bool, keep_work: bool, copy: bool,
              publish: str | None, endpoint_url: str | None, cache: str | None, **values: Any) -> None:
        run = run_settings(**{flag.name: values.pop(flag.name) for flag in own})
        inputs = tuple(path for path in (plan_file, values.get("properties")) if isinstance(path, Path))
        settings = BuildSettings(output=output, run=run, overwrite=overwrite, use_cache=not no_cache,
                                 keep_work=keep_work, copy=copy, publish=publish, endpoint_url=endpoint_url,
                                 remote_cache=cache, inputs=inputs, plan_file=plan_file)
        _build(target, values, settings)

    shared = list(inspect.signature(_shared_flags, eval_str=True).parameters.values())
    build.__signature__ = inspect.Signature([*shared[:2], *own, *shared[2:]])  # type: ignore[attr-defined]
    return build


def _shared_flags(
    *, plan_file: PlanFileOpt = None, output: OutputOpt = Path("out"), overwrite: OverwriteOpt = False,
    no_cache: NoCacheOpt = False, keep_work: KeepWorkOpt = False, copy: CopyOpt = False, publish: PublishOpt = None,
    endpoint_url: EndpointOpt = None, cache: RemoteCacheOpt = None,
) -> None:
    """The flags every build command takes (only its signature is read): the target's own come after --output."""


def _build(target: Target, knobs: dict[str, Any], settings: BuildSettings) -> None:
    plan_file = settings.plan_file
    saved = load_plan_for(target.name, plan_file, knobs, endpoint_url=settings.endpoint_url) \
        if plan_file is not None else None
    if saved is None:
        saved = plan_request(plan_request_from(knobs, target=target.name, endpoint_url=settings.endpoint_url), target)
    plan = saved.plan
    events.emit("plan", **plan.event_fields())
    if not plan.valid:
        report_plan(plan)
        build_summary.append(build_summary.invalid_summary(plan.redacted()))
        raise typer.Exit(2)
    out = current()
    for warning in plan.warnings:
        out.warn(with_hint(warning.message, warning.hint))
    started = time.monotonic()
    try:
        outcome = run_plan(saved, settings, target)
    except LmiBuildError as error:
        build_summary.append(build_summary.failed_summary(plan.redacted(), error.one_line()))
        raise
    _report(outcome)
    build_summary.append(build_summary.build_summary(outcome, time.monotonic() - started))
    if outcome.status == "checkpoint" and settings.run.until != "checkpoint":
        raise typer.Exit(EXIT_INCOMPLETE)


def _steps_table(title: str, steps: list[StepTiming]) -> Table:
    table = Table(title=title, show_header=True)
    table.add_column("step", no_wrap=True, overflow="fold")
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")  # model ids, paths: folded, never cut with "…"
    for step in steps:
        table.add_row(identifier(step.name), f"{step.seconds:.2f}", identifier(step.detail or ""))
    return table


def _report(outcome: BuildOutcome) -> None:
    render: Any = _steps_table(f"lmi-build {outcome.plan.target}: {outcome.status}", outcome.steps)
    if outcome.original_steps is not None:
        # The cached artifact's own build: its steps ran then, not now.
        when = datetime.fromisoformat(outcome.original_built_at or "").strftime("%Y-%m-%d %H:%M %Z").strip()
        render = Group(render, _steps_table(f"original build, {when} (not run now)", outcome.original_steps))
    out = current()
    out.result(outcome.to_json(), render)
    if out.human:
        out.info(f"{outcome.message}: {outcome.output}")
        if outcome.published:
            out.info(f"published to {outcome.published['url']}")
        if outcome.next_command:
            where = f" ({outcome.next_host})" if outcome.next_host else ""
            out.info(f"next{where}: {outcome.next_command}")
