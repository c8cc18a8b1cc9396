"""One build of a matrix: what travels to a worker (``Job``), what comes back (``BuildResult``), and
``run_job``, the function a worker runs (a process of the local pool, or a Ray task).

A job carries its saved plan, so a worker executes exactly what was planned and validated on the
driver. A build failure is a result, never an exception: Ray retries only tasks whose worker or
node was lost, not builds that failed.
"""

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from lmi_build.artifact.cache import ArtifactCache
from lmi_build.artifact.manifest import load_manifest
from lmi_build.building.context import BuildSettings
from lmi_build.building.pipeline import run_plan
from lmi_build.core.errors import LmiBuildError, StepError
from lmi_build.core.fs import live_users, private_dir
from lmi_build.core.types import FrozenModel
from lmi_build.planning.saved import SavedPlan
from lmi_build.reporting import events
from lmi_build.reporting.output import Mode, set_mode
from lmi_build.storage.build_cache import CacheEntry, RemoteBuildCache
from lmi_build.storage.publish import publish
from lmi_build.targets import get_target, parse_plan_text

# cached: a verified shared-cache entry was reused; built: built here, stored and published;
# stand_in: built with a test stand-in compiler (never cached or published); checkpoint: stopped
# after the checkpoint (no engine toolchain on that worker), which is kept for the GPU stage;
# script: a `runner = "script"` bundle was written (run it on a GPU host); failed: the build failed.
ResultStatus = Literal["cached", "built", "stand_in", "checkpoint", "script", "failed"]
SUCCESSFUL: frozenset[str] = frozenset({"cached", "built", "script"})
# Builds that stopped with what the GPU stage needs, kept on the worker's host (``kept``).
STOPPED: frozenset[str] = frozenset({"checkpoint", "script"})


class Resources(FrozenModel):
    """What a build asks the scheduler for, from its plan."""

    num_cpus: float = 1
    num_gpus: float = 0
    neuron_cores: int = 0
    memory_bytes: int | None = None  # the plan's host-RAM estimate for the convert/quantize steps


class Job(FrozenModel):
    name: str
    target: str
    cache_key: str
    saved_plan: str  # SavedPlan JSON
    cache: str | None = None  # s3://... shared build cache
    # No shared cache: reuse and fill this host's local build cache (a matrix on one host, issue 40).
    local_cache: bool = False
    publish: str | None = None
    endpoint_url: str | None = None
    runner: Literal["local", "docker", "script"] = "local"
    step_timeout_s: int | None = None
    resources: Resources = Resources()
    node_labels: dict[str, str] = {}  # Ray label selector: the node group with the build's image


class BuildResult(BaseModel):
    name: str
    cache_key: str
    status: ResultStatus
    host: str = ""
    seconds: float = 0.0
    artifact_url: str | None = None
    error: str | None = None
    kept: str | None = None  # checkpoint / script: where its output stays on ``host``
    next_command: str | None = None  # ... and the command that finishes it
    total_bytes: int | None = None  # the artifact's size (its manifest's total_bytes)
    log: str | None = None  # a failed step's log, kept on ``host`` (its work directory is removed)


class Started(BaseModel):
    """Sent by a worker when it starts a job (a retried job starts again, on another host)."""

    name: str
    host: str
    pid: int | None = None  # the worker's process on ``host``


def resources_for(saved: SavedPlan, runner: str, workers: int | None = None) -> Resources:
    """Engine builds take one GPU per rank (``workers`` overrides), Neuron builds tp NeuronCores;
    every build takes a CPU and, when the plan estimates it, its host RAM: the checkpoint step's
    measured estimate when the plan has one (a streamed conversion needs ~1 GiB for a 7B model, not
    two copies of it), else the general loaded + exported + allowance bound."""
    plan = saved.plan
    memory = plan.memory.host_ram_bytes if plan.memory is not None else None
    if plan.checkpoint_step is not None:
        memory = plan.checkpoint_step.host_ram_bytes
    devices = get_target(plan.target).build_devices(plan)
    if devices is None or runner == "script":  # a script bundle is written without the devices
        return Resources(memory_bytes=memory)
    kind, count = devices
    if kind == "gpu":
        return Resources(num_gpus=workers or count, memory_bytes=memory)
    return Resources(neuron_cores=workers or count, memory_bytes=memory)


def host_label() -> str:
    """This worker's host name, and its Ray node when it runs in Ray (nodes may share a host)."""
    label = socket.gethostname()
    try:
        import ray

        if ray.is_initialized():
            label += f"/{ray.get_runtime_context().get_node_id()[:8]}"
    except ImportError:
        pass
    return label


def run_job(job: Job, announce: Callable[[Started], None] | None = None,
            forward: events.Listener | None = None) -> BuildResult:
    """Reuse the shared cache entry, or build the plan, store it in the cache and publish it.
    ``forward`` receives every event of the build (its steps, byte counts, cache hits) for the driver."""
    set_mode(Mode.QUIET)  # the driver reports; a worker's own lines would interleave
    host = host_label()
    if announce is not None:
        announce(Started(name=job.name, host=host, pid=os.getpid()))
    started = time.monotonic()
    result = BuildResult(name=job.name, cache_key=job.cache_key, status="failed", host=host)
    try:
        with events.listening(forward) if forward is not None else contextlib.nullcontext():
            _cached_or_built(job, result)
    except LmiBuildError as error:
        result.status, result.error = "failed", error.one_line()
    except Exception as error:  # a bug, not a lost node: report it, never retry it
        result.status, result.error = "failed", f"{type(error).__name__}: {error}"
    result.seconds = round(time.monotonic() - started, 3)
    return result


def job_dir(job: Job) -> Path:
    """Where a worker builds ``job``: one directory per cache key under ``LMI_BUILD_FLEET_WORK``
    (default: the system temp directory), so a rerun finds what a killed run left there (the
    build's own lock and work directories are reclaimed by ``run_plan``)."""
    base = Path(os.environ.get("LMI_BUILD_FLEET_WORK") or tempfile.gettempdir())
    return base / f"lmi-build-fleet-{job.cache_key.partition(':')[2][:16]}"


def remove_job_dir(job: Job) -> None:
    """Remove what a dead worker left of ``job``, unless a process still works in it (a vendor tool
    that outlived its worker)."""
    directory = job_dir(job)
    if directory.is_dir() and not directory.is_symlink() and not live_users(directory):
        shutil.rmtree(directory, ignore_errors=True)


def _cached_or_built(job: Job, result: BuildResult) -> None:
    """Fill ``result``: status, artifact URL, why it is not an artifact, what was kept."""
    saved = parse_plan_text(job.saved_plan, f"the plan of {job.name}")
    cache = RemoteBuildCache(job.cache, endpoint_url=job.endpoint_url) if job.cache else None
    entry = cache.lookup(job.cache_key) if cache is not None else None
    if cache is not None and entry is not None:
        events.emit("cache_hit", cache="shared", key=job.cache_key, where=entry.url)
        result.status, result.artifact_url = "cached", _published(cache, entry, job)
        result.total_bytes = entry.total_bytes
        return
    work = private_dir(job_dir(job))
    keep = False
    try:
        output = work / "artifact"
        target = get_target(saved.plan.target)
        run = target.command.settings(runner=job.runner, step_timeout_s=job.step_timeout_s)
        settings = BuildSettings(output=output, run=run, use_cache=job.local_cache, endpoint_url=job.endpoint_url,
                                 overwrite=True)  # what a killed run of this job left
        try:
            outcome = run_plan(saved, settings, target)
        except StepError as error:
            _keep_log(job, error, result)
            raise
        if outcome.status == "cached":  # this host's local cache (a shared one was looked up above)
            result.status = "cached"
            result.total_bytes = load_manifest(output).total_bytes
            result.artifact_url = _published_local(job, output)
            return
        if outcome.status in ("checkpoint", "script"):  # no engine toolchain here, or a bundle for a GPU host
            keep = True
            result.status, result.error = outcome.status, outcome.message
            result.kept, result.next_command = str(outcome.output), outcome.next_command
            return
        if outcome.stand_in:  # never cached, never published
            result.status = "stand_in"
            result.error = "built by a STAND-IN engine compiler: not cached, not published"
            return
        result.status = "built"
        result.total_bytes = load_manifest(output).total_bytes
        if cache is None:
            result.artifact_url = _published_local(job, output)
            return
        entry = cache.store(job.cache_key, output)
        result.artifact_url = _published(cache, entry, job)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _published_local(job: Job, output: Path) -> str | None:
    """Without a shared cache: the publish URL once published; else, with the local cache, the
    artifact's entry there (the work directory goes when the job ends)."""
    if job.publish is not None:
        publish(output, job.publish, endpoint_url=job.endpoint_url)
        return job.publish
    if job.local_cache:
        return str(ArtifactCache().entry(job.cache_key))
    return None


def _keep_log(job: Job, error: StepError, result: BuildResult) -> None:
    """Copy the failed step's log beside the job's work directory (which is removed), and point the
    error's hint at the copy: a matrix's report names a log that is still there."""
    if error.log is None or not error.log.is_file():
        return
    kept = job_dir(job).with_name(f"{job_dir(job).name}-{error.log.name}")
    try:
        shutil.copyfile(error.log, kept)
    except OSError:
        return
    result.log = str(kept)
    error.hint = f"full log: {kept} on {result.host}"


def _published(cache: RemoteBuildCache, entry: CacheEntry, job: Job) -> str:
    """The artifact's URL: the published copy (server-side from the cache), else the cache entry."""
    if job.publish is None:
        return entry.url
    cache.copy_to(entry, job.publish)
    return job.publish
