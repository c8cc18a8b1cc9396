"""Where the jobs of a matrix run: a bounded number of processes on this host, or Ray.

The local executor starts one process per build (``fleet/worker.py``: a killed worker fails only
its build, which runs again as a lost Ray task does); the Ray executor submits one Ray task per
job with the resources its plan needs and lets Ray place, run and (when a node is lost) retry it. Each executor reports a job's start and its result
through callbacks, in the order they happen.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lmi_build.core.errors import OptionError
from lmi_build.core.redaction import redact_text
from lmi_build.fleet import worker
from lmi_build.fleet.job import BuildResult, Job, Started, remove_job_dir, run_job
from lmi_build.fleet.ray_address import RayAddressError, RayTarget, resolve_ray_address
from lmi_build.fleet.worker import parse_message
from lmi_build.reporting import events
from lmi_build.reporting.output import current

ExecutorName = Literal["local", "ray"]
OnStarted = Callable[[Started], None]
OnResult = Callable[[BuildResult], None]
OnEvent = Callable[[str, dict[str, Any]], None]  # a build's name and one event of its build (lmi_build.reporting.events)
POLL_SECONDS = 0.25
RAY_CALLS_PER_WORKER = 1  # see _run_ray
# Every Ray head node offers this resource (ray/_common/constants.py HEAD_NODE_RESOURCE_NAME).
HEAD_NODE_RESOURCE = "node:__internal_head__"


@dataclass(frozen=True)
class Execution:
    executor: ExecutorName = "local"
    max_parallel: int | None = None  # local default: 2; ray default: as many as the cluster fits
    ray_address: str | None = None  # else RAY_ADDRESS, else the host's running Ray, else a local one (ray.init)
    max_retries: int = 3  # Ray re-runs a job whose worker or node was lost this many times
    # Ray: how long a build that no node can take may wait for one (an autoscaling cluster adds
    # nodes); 0 fails it at once, with what it needs and what the largest node has.
    wait_for_resources: float = 0.0


def _ignore_event(name: str, event: dict[str, Any]) -> None:
    """The default for ``on_event``: a run that does not follow its builds' steps."""


def run_jobs(jobs: Sequence[Job], execution: Execution, on_started: OnStarted, on_result: OnResult,
             on_event: OnEvent = _ignore_event) -> None:
    """Run every job; each start, each event of a build (its steps, byte counts) and each result is
    handed to its callback as it happens."""
    if execution.executor == "ray":
        _run_ray(jobs, execution, on_started, on_result, on_event)
    else:
        _run_local(jobs, execution.max_parallel or 2, execution.max_retries, on_started, on_result, on_event)


def _failed(job: Job, error: str) -> BuildResult:
    return BuildResult(name=job.name, cache_key=job.cache_key, status="failed", error=error)


# ---- local: a process pool on this host ----

# How long the workers have to clean up (their builds' work directories, vendor tools) after the
# driver was interrupted, before they are killed: within the 5 s a person waits on Ctrl-C.
WORKER_CLEANUP_SECONDS = 3.0


@contextlib.contextmanager
def _spawned_without_sigint() -> Iterator[None]:
    """Processes started in this block ignore SIGINT for good (an ignored signal stays ignored
    across fork and exec, and Python's start-up keeps it so). Ctrl-C at a terminal signals the whole
    foreground process group: each spawned worker printed its own KeyboardInterrupt traceback, some
    from the middle of its interpreter's start-up. The driver alone takes Ctrl-C and stops them.
    (A blocked signal mask would not do: subprocess resets it in the child.) A Ctrl-C in the few
    milliseconds of the block is lost; pressed again, it stops the run."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class _Worker:
    """One build's process (``fleet/worker.py``) and what it has said on its channel so far."""

    job: Job
    process: subprocess.Popen[bytes]
    channel: int  # the read end of the worker's JSON-lines pipe
    received: bytes = b""
    result: BuildResult | None = None


def _start_worker(job: Job) -> _Worker:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    # The job goes in through an unlinked temporary file: a plan larger than a pipe's buffer must not
    # block the driver until the worker's interpreter has started.
    with tempfile.TemporaryFile() as given, _spawned_without_sigint():
        given.write(job.model_dump_json().encode("utf-8"))
        given.seek(0)
        try:
            process = subprocess.Popen([sys.executable, "-m", worker.__name__, str(write_end), str(os.getpid())],
                                       stdin=given, pass_fds=(write_end,), close_fds=True)
        finally:
            os.close(write_end)
    return _Worker(job=job, process=process, channel=read_end)


def _read_channel(running: _Worker, on_started: OnStarted, on_event: OnEvent, *, to_end: bool = False) -> None:
    """Take the worker's complete lines: a start is announced, a build's event handed on, a result kept."""
    wait_s = 1.0 if to_end else 0.0  # an exited worker's pipe ends at once (unless a child kept it)
    while True:
        ready, _, _ = select.select([running.channel], [], [], wait_s)
        if not ready:
            break
        chunk = os.read(running.channel, 65536)
        if not chunk:
            break
        running.received += chunk
    *lines, running.received = running.received.split(b"\n")
    for line in lines:
        message = parse_message(line)
        if message is None:
            continue
        kind, payload = message
        if kind == "started":
            on_started(Started.model_validate(payload))
        elif kind == "event":
            on_event(running.job.name, payload)
        else:
            running.result = BuildResult.model_validate(payload)


def _death(process: subprocess.Popen[bytes]) -> str:
    code = process.returncode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code} before reporting a result"


def _stop_workers(running: list[_Worker]) -> None:
    """SIGTERM to every worker (each cleans up its build), SIGKILL to those still running after
    WORKER_CLEANUP_SECONDS; what a killed one left is removed."""
    for each in running:
        with contextlib.suppress(OSError):
            each.process.terminate()
    deadline = time.monotonic() + WORKER_CLEANUP_SECONDS
    for each in running:
        try:
            each.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            each.process.kill()
            each.process.wait()
        os.close(each.channel)
        remove_job_dir(each.job)


def _run_local(jobs: Sequence[Job], max_parallel: int, max_retries: int, on_started: OnStarted,
               on_result: OnResult, on_event: OnEvent) -> None:
    """One process per build, ``max_parallel`` at once. A worker that dies without a result (SIGKILL,
    the OOM killer) fails only its own build, which runs again up to ``max_retries`` times (as Ray
    re-runs a task whose worker was lost); what it left in its work directory is removed."""
    waiting = list(jobs)
    running: list[_Worker] = []
    deaths: dict[str, int] = {}
    try:
        while waiting or running:
            while waiting and len(running) < max_parallel:
                running.append(_start_worker(waiting.pop(0)))
            select.select([each.channel for each in running], [], [], POLL_SECONDS)
            for each in list(running):
                _read_channel(each, on_started, on_event)
                if each.process.poll() is None:
                    continue
                _read_channel(each, on_started, on_event, to_end=True)
                os.close(each.channel)
                running.remove(each)
                if each.result is not None:
                    on_result(each.result)
                    continue
                remove_job_dir(each.job)
                deaths[each.job.name] = deaths.get(each.job.name, 0) + 1
                if deaths[each.job.name] <= max_retries:
                    on_event(each.job.name, events.make("retry", what=f"the build {each.job.name}",
                                                        attempt=deaths[each.job.name] + 1, of=max_retries + 1,
                                                        reason=f"its process was {_death(each.process)}"))
                    waiting.insert(0, each.job)
                else:
                    on_result(_failed(each.job, f"the build process was {_death(each.process)} "
                                                f"({deaths[each.job.name]} time(s), --max-retries {max_retries})"))
    except BaseException:  # Ctrl-C, SIGTERM: the workers' builds stop and clean up too
        _stop_workers(running)
        raise


# ---- ray: one task per job, resources from its plan ----

def ray_task_options(job: Job, max_retries: int) -> dict[str, Any]:
    """The Ray task options of a job: GPUs / NeuronCores / CPUs / memory from its plan; retried
    only when its worker or node is lost (``retry_exceptions=False``: a failed build is final)."""
    resources = job.resources
    options: dict[str, Any] = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus,
                               "max_retries": max_retries, "retry_exceptions": False, "name": f"lmi-build:{job.name}"}
    if resources.neuron_cores:
        options["resources"] = {"neuron_cores": resources.neuron_cores}
    if resources.memory_bytes:
        options["memory"] = resources.memory_bytes
    if job.node_labels:
        options["label_selector"] = dict(job.node_labels)
    return options


def _node_offers(node: dict[str, Any], options: dict[str, Any]) -> bool:
    """Whether one alive node of ``ray.nodes()`` could ever run a task with these options."""
    total = node.get("Resources") or {}
    wanted = {"CPU": options.get("num_cpus") or 0, "GPU": options.get("num_gpus") or 0,
              "memory": options.get("memory") or 0, **(options.get("resources") or {})}
    if any(amount and float(total.get(name, 0)) < float(amount) for name, amount in wanted.items()):
        return False
    labels = node.get("Labels") or {}
    return all(labels.get(key) == value for key, value in (options.get("label_selector") or {}).items())


def infeasible_reason(nodes: list[dict[str, Any]], options: dict[str, Any]) -> str | None:
    """Why no node of the cluster can take a task with ``options`` (Ray would queue it forever as
    "infeasible"), or None when some alive node can."""
    alive = [node for node in nodes if node.get("Alive")]
    if any(_node_offers(node, options) for node in alive):
        return None
    wanted = [f"{float(options.get('num_gpus') or 0):g} GPU(s)", f"{float(options.get('num_cpus') or 0):g} CPU(s)"]
    for name, amount in (options.get("resources") or {}).items():
        wanted.append(f"{amount} {name}")
    if options.get("memory"):
        wanted.append(f"{options['memory'] / 2**30:.1f} GiB memory")
    if options.get("label_selector"):
        wanted.append("labels " + ", ".join(f"{k}={v}" for k, v in options["label_selector"].items()))
    most_gpus = max((float((node.get("Resources") or {}).get("GPU", 0)) for node in alive), default=0)
    return (f"needs {', '.join(wanted)} on one node, and none of the cluster's {len(alive)} node(s) has that "
            f"(most GPUs on a node: {most_gpus:g})")


def _ray_announce(channel: Any) -> Callable[[Started], None]:
    def announce(started: Started) -> None:
        with contextlib.suppress(Exception):  # progress only: a lost event must never fail a build
            channel.put(started, timeout=5)

    return announce


def _ray_forward(channel: Any, name: str) -> Callable[[dict[str, Any]], None]:
    """A build's events into the driver's queue, as (name, event): never blocking the build."""
    def forward(event: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # progress only: a lost event must never fail a build
            channel.put_nowait((name, event))

    return forward


def _ray_job(job: Job, channel: Any) -> BuildResult:
    result = run_job(job, _ray_announce(channel), _ray_forward(channel, job.name))
    # The worker exits after this call (RAY_CALLS_PER_WORKER): its interpreter's shutdown would
    # garbage-collect all of torch and ModelOpt for seconds, holding ~0.5 GiB meanwhile (a peak
    # showed four such exiting workers). See lmi_build.cli._skip_collection_at_exit.
    gc.freeze()
    return result


def _run_ray(jobs: Sequence[Job], execution: Execution, on_started: OnStarted, on_result: OnResult,
             on_event: OnEvent) -> None:
    target = resolve_ray_address(execution.ray_address)  # before Ray: parsed, probed, redacted
    # Ray's own processes and C++ core write to the inherited stdout/stderr (banners, stack dumps
    # on SIGTERM): that goes to the debug channel; lmi-build's own lines still reach the console.
    with current().native_output_to_debug():
        _run_ray_tasks(jobs, execution, target, on_started, on_result, on_event)


def _check_local_cache(jobs: Sequence[Job], nodes: list[dict[str, Any]]) -> None:
    """A matrix without a shared cache uses this host's local one: right for a Ray of this host
    alone, wrong for a cluster, whose other nodes would neither reuse it nor leave their artifacts in it."""
    alive = [node for node in nodes if node.get("Alive")]
    if len(alive) > 1 and any(job.local_cache for job in jobs):
        raise OptionError(f"matrix --executor ray on a cluster of {len(alive)} nodes needs a shared build cache: "
                          "this host's local cache is not on the other nodes (their builds would neither reuse "
                          "it nor leave their artifacts in it)",
                          hint="pass --cache s3://bucket/prefix/ (or set cache = \"s3://...\" in the config file)")


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with its own ``sys.exit(15)`` (ray/_private/worker.py,
    ``init``): a CI cancel then ended the matrix with status 1 and no word. Put lmi-build's handler
    back (it cleans up like Ctrl-C and exits 143)."""
    main = threading.current_thread() is threading.main_thread()
    ours = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if ours is not None:
            signal.signal(signal.SIGTERM, ours)


def _init_ray(target: RayTarget) -> None:
    """``ray.init`` at the checked address; what Ray logs or prints meanwhile (its token-auth
    banner) goes to the debug channel, and a failure is one line with the address redacted."""
    import ray

    try:
        # address None: a Ray already running on this host (ray start), else a local Ray for this run.
        with _keeping_sigterm_handler(), current().library_output():
            ray.init(address=target.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, OSError, TimeoutError) as error:
        first = redact_text(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
        raise RayAddressError(f"cannot start or reach Ray at {target.shown}: {first}",
                              hint="check --ray-address / RAY_ADDRESS (ray status on the head shows it)") from None


def _run_ray_tasks(jobs: Sequence[Job], execution: Execution, target: RayTarget, on_started: OnStarted,
                   on_result: OnResult, on_event: OnEvent) -> None:
    import ray
    from ray.exceptions import RayError
    from ray.util.queue import Empty, Queue

    started_here = not ray.is_initialized()
    if started_here:
        _init_ray(target)
    try:
        _check_local_cache(jobs, ray.nodes())
        # Start and build events go through a Ray queue actor on the head node (as Ray Train places its state
        # actor), so losing a worker node never loses the progress channel.
        channel = Queue(actor_options={"num_cpus": 0, "resources": {HEAD_NODE_RESOURCE: 0.001}})
        # max_calls=1: a build's worker exits when the build ends. Ray keeps an idle worker per CPU
        # for reuse, and one that had run a build held torch, transformers and ModelOpt (~530 MB
        # each, measured: 5 idle workers, 2.6 GiB, on the suite's two-node cluster). A build takes
        # seconds to hours; a fresh worker's start-up costs about a second.
        task = ray.remote(max_calls=RAY_CALLS_PER_WORKER)(_ray_job)
        waiting = list(jobs)
        limit = execution.max_parallel or len(jobs)
        pending: dict[Any, Job] = {}

        def drain() -> None:
            while True:
                try:
                    item = channel.get_nowait()
                    if isinstance(item, Started):
                        on_started(item)
                    else:  # (build name, event)
                        on_event(*item)
                except Empty:
                    return
                except RayError:  # the queue's node is gone: progress only
                    return

        submitted: dict[Any, float] = {}
        hint = ("add a node that has it, or pass --wait-for-resources SECONDS when the cluster autoscales"
                if not execution.wait_for_resources else "no node with it joined within --wait-for-resources")
        while waiting or pending:
            while waiting and len(pending) < limit:
                job = waiting.pop(0)
                options = ray_task_options(job, execution.max_retries)
                reason = infeasible_reason(ray.nodes(), options)
                if reason is not None and not execution.wait_for_resources:
                    on_result(_failed(job, f"{reason}: {hint}"))
                    continue
                if reason is not None:  # an autoscaling cluster may add the node; say what it waits for
                    current().info(f"{job.name} {reason}: waiting up to {execution.wait_for_resources:g} s "
                                   "for a node that has it (--wait-for-resources)")
                ref = task.options(**options).remote(job, channel)
                pending[ref], submitted[ref] = job, time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            drain()
            for ref in [r for r in pending if r not in ready
                        and time.monotonic() - submitted[r] > execution.wait_for_resources > 0]:
                job = pending[ref]
                reason = infeasible_reason(ray.nodes(), ray_task_options(job, execution.max_retries))
                if reason is not None:  # still no node for it: give up on this one build
                    ray.cancel(ref, force=True)
                    del pending[ref]
                    on_result(_failed(job, f"{reason}: {hint}"))
            for ref in ready:
                job = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except RayError as error:  # lost its worker/node more often than max_retries allows
                    result = _failed(job, f"lost its Ray worker {execution.max_retries + 1} times: "
                                          f"{type(error).__name__}")
                on_result(result)
        drain()
    finally:
        if started_here:
            ray.shutdown()
