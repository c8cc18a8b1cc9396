"""A matrix run: plan and check every build, check the cache bucket, run the jobs, keep the state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lmi_build.fleet.executors import Execution, ExecutorName, OnResult, OnStarted, run_jobs
from lmi_build.fleet.job import BuildResult, Started
from lmi_build.fleet.matrix import plan_matrix
from lmi_build.fleet.ray_address import resolve_ray_address
from lmi_build.fleet.report import MatrixProgress
from lmi_build.output import current
from lmi_build.storage.build_cache import RemoteBuildCache
from lmi_build.storage.client import check_publish_targets


def run_matrix(matrix_file: Path, *, cache: str | None, executor: ExecutorName = "local",
               ray_address: str | None = None, max_parallel: int | None = None, max_retries: int = 3,
               endpoint_url: str | None = None, wait_for_resources: float = 0.0,
               on_started: OnStarted | None = None,
               on_result: OnResult | None = None,
               on_planned: Callable[[MatrixProgress], None] | None = None) -> MatrixProgress:
    """Run every build of ``matrix_file``; the returned progress holds every result. Nothing runs
    unless every build plans cleanly, the cache bucket is reachable and every publish bucket
    takes a test write. ``on_planned`` receives the progress before the first build starts (what
    an interrupted run reports from)."""
    jobs = plan_matrix(matrix_file, cache=cache, endpoint_url=endpoint_url)
    if executor == "ray":  # a wrong or dead Ray address fails now, in seconds, before the cache is touched
        resolve_ray_address(ray_address)
    if cache is not None:
        RemoteBuildCache(cache, endpoint_url=endpoint_url).check()
    check_publish_targets([job.publish for job in jobs if job.publish is not None], endpoint_url)
    progress = MatrixProgress(jobs)
    if on_planned is not None:
        on_planned(progress)

    def started(event: Started) -> None:
        progress.started(event)
        if on_started is not None:
            on_started(event)

    def finished(result: BuildResult) -> None:
        progress.finished(result)
        if on_result is not None:
            on_result(result)

    execution = Execution(executor=executor, max_parallel=max_parallel, ray_address=ray_address,
                          max_retries=max_retries, wait_for_resources=wait_for_resources)
    with progress.live(current()):
        run_jobs(jobs, execution, started, finished)
    return progress
