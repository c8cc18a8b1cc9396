"""A matrix run: plan and check every build, check the cache bucket, run the jobs, keep the state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmi_build.artifact.cache import ArtifactCache
from lmi_build.fleet.executors import Execution, ExecutorName, OnResult, OnStarted, run_jobs
from lmi_build.fleet.job import BuildResult, Job, Started
from lmi_build.fleet.matrix import plan_matrix
from lmi_build.fleet.ray_address import resolve_ray_address
from lmi_build.fleet.report import MatrixProgress
from lmi_build.reporting import events
from lmi_build.reporting.output import current
from lmi_build.storage.build_cache import RemoteBuildCache
from lmi_build.storage.client import check_publish_targets
from lmi_build.targets import parse_plan_text

OnUpdate = Callable[[MatrixProgress], None]


def run_matrix(matrix_file: Path, *, cache: str | None, executor: ExecutorName = "local",
               ray_address: str | None = None, max_parallel: int | None = None, max_retries: int = 3,
               endpoint_url: str | None = None, wait_for_resources: float = 0.0, local_cache: bool = False,
               on_started: OnStarted | None = None, on_result: OnResult | None = None,
               on_update: OnUpdate | None = None,
               on_planned: OnUpdate | None = None) -> MatrixProgress:
    """Run every build of ``matrix_file``; the returned progress holds every result. Nothing runs
    unless every build plans cleanly, the cache bucket is reachable and every publish bucket
    takes a test write. ``local_cache`` (no ``cache``): the builds reuse and fill this host's local
    build cache (refused on a Ray cluster of more than one node). ``on_planned`` receives the
    progress before the first build starts (what an interrupted run reports from); ``on_update``
    sees it after each start, step and result (what the live view draws)."""
    jobs = plan_matrix(matrix_file, cache=cache, endpoint_url=endpoint_url)
    if cache is None and local_cache:
        jobs = [job.model_copy(update={"local_cache": True}) for job in jobs]
        current().info(f"no --cache: the builds reuse and fill this host's local build cache {ArtifactCache().root}")
    if executor == "ray":  # a wrong or dead Ray address fails now, in seconds, before the cache is touched
        resolve_ray_address(ray_address)
    if cache is not None:
        RemoteBuildCache(cache, endpoint_url=endpoint_url).check()
    check_publish_targets([job.publish for job in jobs if job.publish is not None], endpoint_url)
    progress = MatrixProgress(jobs)
    _announce_plans(jobs)
    if on_planned is not None:
        on_planned(progress)

    def updated() -> None:
        if on_update is not None:
            on_update(progress)

    def started(event: Started) -> None:
        progress.started(event)
        events.emit("build_start", build=event.name, host=event.host, attempt=progress.starts[event.name])
        if on_started is not None:
            on_started(event)
        updated()

    def build_event(name: str, event: dict[str, Any]) -> None:
        progress.event(name, event)
        events.forward({**event, "build": name})
        updated()

    def finished(result: BuildResult) -> None:
        progress.finished(result)
        events.emit("build_result", build=result.name, status=result.status, host=result.host,
                    seconds=result.seconds, artifact_url=result.artifact_url, error=result.error, kept=result.kept)
        if on_result is not None:
            on_result(result)
        updated()

    execution = Execution(executor=executor, max_parallel=max_parallel, ray_address=ray_address,
                          max_retries=max_retries, wait_for_resources=wait_for_resources)
    with progress.live(current()):
        run_jobs(jobs, execution, started, finished, build_event)
    return progress


def _announce_plans(jobs: list[Job]) -> None:
    """A ``plan`` event per build (``--events``), with its name."""
    if not events.listened():
        return
    for job in jobs:
        plan = parse_plan_text(job.saved_plan, f"the plan of {job.name}").plan
        events.emit("plan", build=job.name, **plan.event_fields())
