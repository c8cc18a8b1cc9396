"""One build of a matrix: what travels to a worker (``Job``), what comes back (``BuildResult``), and
``run_job``, the function a worker runs (a process of the local pool, or a Ray task).

A job carries its saved plan, so a worker executes exactly what was planned and validated on the
driver. A build failure is a result, never an exception: Ray retries only tasks whose worker or
node was lost, not builds that failed.
"""

import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from lmi_build.building.context import BuildSettings
from lmi_build.errors import LmiBuildError
from lmi_build.output import Mode, set_mode
from lmi_build.pipeline import run_plan
from lmi_build.planning.saved import SavedPlan
from lmi_build.storage.build_cache import CacheEntry, RemoteBuildCache
from lmi_build.storage.publish import publish
from lmi_build.targets import get_target, parse_plan_text
from lmi_build.types import FrozenModel

# cached: a verified shared-cache entry was reused; built: built here, stored and published;
# stand_in: built with a test stand-in compiler (never cached or published); incomplete: the build
# stopped before an artifact (no engine toolchain on that worker); failed: the build failed.
ResultStatus = Literal["cached", "built", "stand_in", "incomplete", "failed"]
SUCCESSFUL: frozenset[str] = frozenset({"cached", "built"})


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
    publish: str | None = None
    endpoint_url: str | None = None
    runner: Literal["local", "docker"] = "local"
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


class Started(BaseModel):
    """Sent by a worker when it starts a job (a retried job starts again, on another host)."""

    name: str
    host: str


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
    if devices is None:
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


def run_job(job: Job, announce: Callable[[Started], None] | None = None) -> BuildResult:
    """Reuse the shared cache entry, or build the plan, store it in the cache and publish it."""
    set_mode(Mode.QUIET)  # the driver reports; a worker's own lines would interleave
    host = host_label()
    if announce is not None:
        announce(Started(name=job.name, host=host))
    started = time.monotonic()
    result = BuildResult(name=job.name, cache_key=job.cache_key, status="failed", host=host)
    try:
        result.status, result.artifact_url, result.error = _cached_or_built(job)
    except LmiBuildError as error:
        result.error = error.one_line()
    except Exception as error:  # a bug, not a lost node: report it, never retry it
        result.error = f"{type(error).__name__}: {error}"
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _cached_or_built(job: Job) -> tuple[ResultStatus, str | None, str | None]:
    """(status, artifact URL, why it is not an artifact)."""
    saved = parse_plan_text(job.saved_plan, f"the plan of {job.name}")
    cache = RemoteBuildCache(job.cache, endpoint_url=job.endpoint_url) if job.cache else None
    entry = cache.lookup(job.cache_key) if cache is not None else None
    if cache is not None and entry is not None:
        return "cached", _published(cache, entry, job), None
    with tempfile.TemporaryDirectory(prefix="lmi-build-fleet-", dir=os.environ.get("LMI_BUILD_FLEET_WORK")) as work:
        output = Path(work) / "artifact"
        target = get_target(saved.plan.target)
        run = target.command.settings(runner=job.runner, step_timeout_s=job.step_timeout_s)
        settings = BuildSettings(output=output, run=run, use_cache=False, endpoint_url=job.endpoint_url)
        outcome = run_plan(saved, settings, target)
        if outcome.status != "artifact":  # e.g. exit 3: no engine toolchain on this worker
            return "incomplete", None, outcome.message
        if outcome.stand_in:  # never cached, never published
            return "stand_in", None, "built by a STAND-IN engine compiler: not cached, not published"
        if cache is None:
            if job.publish is None:
                return "built", None, None
            publish(output, job.publish, endpoint_url=job.endpoint_url)
            return "built", job.publish, None
        entry = cache.store(job.cache_key, output)
    return "built", _published(cache, entry, job), None


def _published(cache: RemoteBuildCache, entry: CacheEntry, job: Job) -> str:
    """The artifact's URL: the published copy (server-side from the cache), else the cache entry."""
    if job.publish is None:
        return entry.url
    cache.copy_to(entry, job.publish)
    return job.publish
