"""``lmi-build matrix``: plan every build of a matrix file, then run them on this host or on Ray,
sharing one S3 build cache (without one, on this host: its local build cache). Ray is imported only when ``--executor ray`` runs."""

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from lmi_build.cli.app import EndpointOpt, with_events_option
from lmi_build.cli.build_cmd import EXIT_INCOMPLETE
from lmi_build.cli.user_config import cache_default
from lmi_build.core.errors import LmiBuildError
from lmi_build.fleet.ci_reports import MatrixReports
from lmi_build.fleet.matrix import MatrixError
from lmi_build.fleet.run import run_matrix
from lmi_build.reporting.output import current

MATRIX_EPILOG = """[bold]Examples[/bold]

  # this host alone, its local build cache (no S3); events as JSON lines:
  lmi-build matrix builds.toml --events events.jsonl

  lmi-build matrix builds.toml --cache s3://team-bucket/lmi-build-cache/

  lmi-build matrix builds.toml --cache s3://team-bucket/lmi-build-cache/ \\
      --executor ray --ray-address auto --json

Every build is planned and checked first: one invalid build fails the run before any work. Problems
are listed one per line after a summary line.

Exit status: 0 every build succeeded or was cached, 2 invalid matrix (or plans), 1 any build failed or
could not be planned (an unreachable Hub or bucket, a missing file), 3 the others succeeded and some
stopped at their checkpoint (no TensorRT-LLM here): kept, with the command that finishes each."""


class ExecutorChoice(str, Enum):
    local = "local"
    ray = "ray"


MatrixFileArg = Annotated[Path, typer.Argument(help="The matrix file (builds.toml): defaults and \\[\\[build]] tables.")]


def _cache_default(value: str | None) -> str | None:
    return cache_default(value)


CacheOpt = Annotated[str | None, typer.Option(
    "--cache", callback=_cache_default,
    help="Shared build cache s3://bucket/prefix: committed entries are reused, new artifacts stored "
    "(a build's artifact lives there, and at its publish URL). Default: cache in ~/.config/lmi-build/config.toml, "
    "else this host's local build cache (one host only: a Ray cluster needs the shared one).")]
ExecutorOpt = Annotated[ExecutorChoice, typer.Option(
    "--executor", help="local: one process per build on this host; ray: one Ray task per build, resources from its plan.")]
RayAddressOpt = Annotated[str | None, typer.Option(
    "--ray-address", help="Ray cluster to use (e.g. auto, ray://head:10001). Default: RAY_ADDRESS, "
    "else the Ray last started on this host (ray start), else a local Ray started for this run (ray.init's rule).")]
MaxParallelOpt = Annotated[int | None, typer.Option(
    "--max-parallel", min=1, help="Builds running at once (default: 2 locally; with Ray, what the cluster fits).")]
MaxRetriesOpt = Annotated[int, typer.Option(
    "--max-retries", min=0, help="Times a build is re-run after its worker process (or Ray node) was lost "
    "(never after a build failure).")]
WaitOpt = Annotated[float, typer.Option(
    "--wait-for-resources", min=0, metavar="SECONDS",
    help="Ray: how long a build that no node of the cluster can take waits for one to join (an "
    "autoscaling cluster); 0 fails it at once.")]


JunitXmlOpt = Annotated[Path | None, typer.Option(
    "--junit-xml", metavar="PATH",
    help="Also write a JUnit XML report there: a test case per build (a failure per failed or refused build), "
    "written too when the matrix is invalid or the run is interrupted.")]


def register(app: typer.Typer) -> None:
    app.command("matrix", epilog=MATRIX_EPILOG,
                help="Build a matrix of artifacts (models x tp x quantization ...) on this host or a Ray cluster, "
                "sharing an S3 build cache.")(with_events_option(matrix))


def matrix(
    matrix_file: MatrixFileArg,
    cache: CacheOpt = None,
    executor: ExecutorOpt = ExecutorChoice.local,
    ray_address: RayAddressOpt = None,
    max_parallel: MaxParallelOpt = None,
    max_retries: MaxRetriesOpt = 3,
    wait_for_resources: WaitOpt = 0.0,
    endpoint_url: EndpointOpt = None,
    junit_xml: JunitXmlOpt = None,
) -> None:
    reports = MatrixReports(matrix_file, junit_xml)
    try:
        progress = run_matrix(matrix_file, cache=cache, executor=executor.value, ray_address=ray_address,
                              max_parallel=max_parallel, max_retries=max_retries, endpoint_url=endpoint_url,
                              wait_for_resources=wait_for_resources, local_cache=cache is None,
                              on_planned=reports.hold)
    except MatrixError as error:
        reports.refused(error)
        raise
    except LmiBuildError as error:
        reports.failed(error)
        raise
    except KeyboardInterrupt:
        reports.interrupted()
        raise
    out = current()
    out.result(progress.to_json(), progress.table())
    reports.finished(progress)
    if progress.stopped_only:
        raise typer.Exit(EXIT_INCOMPLETE)
    if not progress.succeeded:
        raise typer.Exit(1)
