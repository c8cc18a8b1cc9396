"""`lmi-build verify` and `lmi-build inspect`: check and describe a built artifact (local or s3://)."""

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lmi_build.artifact.ci_reports import error_suite, verify_suite, verify_summary
from lmi_build.artifact.describe import describe, render
from lmi_build.artifact.verify import serving_target
from lmi_build.cli.app import EndpointOpt, with_events_option
from lmi_build.cli.unfinished import unfinished_build
from lmi_build.core.errors import LmiBuildError, with_hint
from lmi_build.core.types import PlanMessage
from lmi_build.planning.render import SHOWN_MESSAGES
from lmi_build.reporting import github, markdown
from lmi_build.reporting.junit import Suite, check_report_path, write_report
from lmi_build.reporting.output import current
from lmi_build.storage.verify import load_any, verify
from lmi_build.targets import TARGETS

LocationArg = Annotated[str, typer.Argument(help="Artifact directory or s3://bucket/prefix.", show_default=False)]


def verify_command(
    location: LocationArg,
    for_container: Annotated[
        str | None, typer.Option("--for-container", help="Container profile the artifact will be served by.")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Serving GPU: SM (sm80, sm90) or name (a10g, h100).")] = None,
    neuron_platform: Annotated[
        str | None, typer.Option("--neuron-platform", help="Serving Neuron platform: inf2 or trn1.")
    ] = None,
    devices: Annotated[
        int | None, typer.Option("--devices", help="GPUs or NeuronCores the model will be served on.")
    ] = None,
    neuron_cc_flags: Annotated[
        str | None,
        typer.Option("--neuron-cc-flags", help="The neuronx-cc flags string the serving container computes."),
    ] = None,
    endpoint_url: EndpointOpt = None,
    junit_xml: Annotated[Path | None, typer.Option(
        "--junit-xml", metavar="PATH",
        help="Also write a JUnit XML report there (outside the artifact): a test case per check.")] = None,
) -> None:
    """Check an artifact is intact, complete, and fits where it will be served.

    Checks the manifest, every file's size and SHA-256, the layout's completeness (rank files,
    tokenizer, ...), and the serving target: container toolchain versions, GPU SM, Neuron
    platform, device count. Exit 0 valid, 2 invalid, 1 other errors.

    [b]Examples[/b]

      lmi-build verify out/llama-trt --for-container lmi-0.27.0-trtllm-0.8.0 \\
          --gpu sm90 --devices 4

      lmi-build verify s3://models/llama-7b/trt \\
          --endpoint-url http://localhost:8333 --json
    """
    started, clock = datetime.now().astimezone(), time.monotonic()
    if junit_xml is not None:
        check_report_path(junit_xml, outside=() if location.startswith("s3://") else (Path(location),))
    try:
        if (unfinished := unfinished_build(location)) is not None:
            raise unfinished
        serving = serving_target(TARGETS, container=for_container, gpu=gpu, neuron_platform=neuron_platform,
                                 devices=devices, compiler_flags=neuron_cc_flags)
        report = verify(location, TARGETS, serving=serving, endpoint_url=endpoint_url)
    except LmiBuildError as error:  # nothing could be checked: the reports say why
        code, reason = error.code, error.one_line()
        _write_reports(junit_xml, lambda: error_suite(location, code, reason, started=started),
                       lambda: f"## lmi-build verify {markdown.code(location)}: {markdown.text(reason)}\n")
        raise
    _write_reports(junit_xml, lambda: verify_suite(location, report, started=started,
                                                   seconds=time.monotonic() - clock),
                   lambda: verify_summary(location, report))
    out = current()
    _report_lines(out.warn, "warning", report.warnings)
    if report.startup is not None:
        out.info(report.startup.summary())
    if report.valid:
        summary = report.artifact
        out.result(report.to_json(),
                   f"[green]valid[/green] {escape(location)}: {summary.get('target')} / {summary.get('layout')}, "
                   f"{summary.get('files')} files, {summary.get('total_bytes')} bytes")
        return
    _report_lines(out.error, "error", report.errors)
    out.result(report.to_json(), f"[red]invalid[/red] {escape(location)}: {len(report.errors)} error(s)")
    raise typer.Exit(2)


def _write_reports(junit_xml: Path | None, suite: Callable[[], Suite], summary: Callable[[], str]) -> None:
    if junit_xml is not None:
        write_report(junit_xml, [suite()])
        current().info(f"JUnit report: {junit_xml}")
    github.append_summary(summary())


def _report_lines(emit: Callable[[str], None], kind: str, messages: Sequence[PlanMessage]) -> None:
    """One line per problem up to the plan's limit, then a count: a tampered manifest of 200k
    entries is not 200k lines."""
    for message in messages[:SHOWN_MESSAGES]:
        emit(with_hint(message.message, message.hint))
    if len(messages) > SHOWN_MESSAGES:
        emit(f"... and {len(messages) - SHOWN_MESSAGES} more {kind}s (--json lists every one)")


def inspect_command(
    location: LocationArg,
    endpoint_url: EndpointOpt = None,
) -> None:
    """Describe an artifact: what, from where, for what, how big, how long, by whom.

    Reads only the manifest: target, layout, model, quantization, tp/pp, dtype and lengths;
    source identity; toolchain, GPU SM / Neuron platform, image; files and bytes; step timings;
    when and by which lmi-build.

    [b]Examples[/b]

      lmi-build inspect out/tiny-llama-hf

      lmi-build inspect s3://models/llama-7b/trt --json | jq .for
    """
    if (unfinished := unfinished_build(location)) is not None:
        raise unfinished
    info = describe(load_any(location, endpoint_url), location)
    current().result(info, render(info))


def register(app: typer.Typer) -> None:
    app.command("verify", no_args_is_help=True)(with_events_option(verify_command))
    app.command("inspect", no_args_is_help=True)(inspect_command)
