"""Where the jobs of a matrix run: a bounded process pool on this host, or Ray.

No scheduler, queue or worker protocol of our own: the local executor is ``concurrent.futures``,
the Ray executor submits one Ray task per job with the resources its plan needs and lets Ray
place, run and (when a node is lost) retry it. Each executor reports a job's start and its result
through callbacks, in the order they happen.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

from lmi_build.errors import Terminated
from lmi_build.fleet.job import BuildResult, Job, Started, run_job
from lmi_build.fleet.ray_address import RayAddressError, RayTarget, resolve_ray_address
from lmi_build.output import current
from lmi_build.redaction import redact_text

ExecutorName = Literal["local", "ray"]
OnStarted = Callable[[Started], None]
OnResult = Callable[[BuildResult], None]
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


def run_jobs(jobs: Sequence[Job], execution: Execution, on_started: OnStarted, on_result: OnResult) -> None:
    if execution.executor == "ray":
        _run_ray(jobs, execution, on_started, on_result)
    else:
        _run_local(jobs, execution.max_parallel or 2, on_started, on_result)


def _failed(job: Job, error: str) -> BuildResult:
    return BuildResult(name=job.name, cache_key=job.cache_key, status="failed", error=error)


# ---- local: a process pool on this host ----

# How long the pool's workers have to clean up (their builds' work directories, vendor tools) after
# the driver was interrupted, before they are killed: within the 5 s a person waits on Ctrl-C.
WORKER_CLEANUP_SECONDS = 3.0


_worker_events: Any = None  # a worker's queue of Started events, given to it when it was spawned


def _keep_events(events: Any) -> None:
    global _worker_events
    _worker_events = events


def _run_announcing(job: Job) -> BuildResult:
    # The worker never sees Ctrl-C (see _spawned_without_sigint); the driver stops it with SIGTERM,
    # which cleans up as an interrupt does. Idle, a worker dies of SIGTERM silently (the default).
    def terminate(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not interrupt the cleanup
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        return run_job(job, _worker_events.put)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


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


def _stop_workers(pool: Any) -> None:
    """SIGTERM to every worker of ``pool`` (each cleans up its build), SIGKILL to those still
    running after WORKER_CLEANUP_SECONDS. concurrent.futures has no public way to stop a running
    task (Python 3.14 adds terminate_workers()); its process table is read for that."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # shutdown() forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(OSError):
            process.terminate()
    deadline = time.monotonic() + WORKER_CLEANUP_SECONDS
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            with contextlib.suppress(OSError):
                process.kill()
            process.join(1.0)


def _run_local(jobs: Sequence[Job], max_parallel: int, on_started: OnStarted, on_result: OnResult) -> None:
    # spawn: a forked child would inherit the driver's threads (rich's live view, boto3 pools). The
    # events queue reaches each worker as it is spawned (a multiprocessing queue cannot be a task's
    # argument), so no manager process is needed: its start-up was a second-long window in which
    # Ctrl-C was ignored.
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    with ProcessPoolExecutor(max_workers=max_parallel, mp_context=context, initializer=_keep_events,
                             initargs=(events,)) as pool:
        with _spawned_without_sigint():  # the pool spawns its workers as tasks are submitted
            pending: dict[Future[BuildResult], Job] = {pool.submit(_run_announcing, job): job for job in jobs}

        def drain() -> None:
            while True:
                try:
                    on_started(events.get_nowait())
                except queue.Empty:
                    return

        try:
            while pending:
                done, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                drain()
                for future in done:
                    job = pending.pop(future)
                    try:
                        result = future.result()
                    except Exception as error:  # the worker process died (killed, out of memory)
                        result = _failed(job, f"the build process died: {type(error).__name__}: {error}")
                    on_result(result)
        except BaseException:  # Ctrl-C, SIGTERM: the workers' builds stop and clean up too
            _stop_workers(pool)
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


def _ray_announce(events: Any) -> Callable[[Started], None]:
    def announce(started: Started) -> None:
        with contextlib.suppress(Exception):  # progress only: a lost event must never fail a build
            events.put(started, timeout=5)

    return announce


def _ray_job(job: Job, events: Any) -> BuildResult:
    result = run_job(job, _ray_announce(events))
    # The worker exits after this call (RAY_CALLS_PER_WORKER): its interpreter's shutdown would
    # garbage-collect all of torch and ModelOpt for seconds, holding ~0.5 GiB meanwhile (a peak
    # showed four such exiting workers). See lmi_build.cli._skip_collection_at_exit.
    gc.freeze()
    return result


def _run_ray(jobs: Sequence[Job], execution: Execution, on_started: OnStarted, on_result: OnResult) -> None:
    target = resolve_ray_address(execution.ray_address)  # before Ray: parsed, probed, redacted
    # Ray's own processes and C++ core write to the inherited stdout/stderr (banners, stack dumps
    # on SIGTERM): that goes to the debug channel; lmi-build's own lines still reach the console.
    with current().native_output_to_debug():
        _run_ray_tasks(jobs, execution, target, on_started, on_result)


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
                   on_result: OnResult) -> None:
    import ray
    from ray.exceptions import RayError
    from ray.util.queue import Empty, Queue

    started_here = not ray.is_initialized()
    if started_here:
        _init_ray(target)
    try:
        # Start events go through a Ray queue actor on the head node (as Ray Train places its state
        # actor), so losing a worker node never loses the progress channel.
        events = Queue(actor_options={"num_cpus": 0, "resources": {HEAD_NODE_RESOURCE: 0.001}})
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
                    on_started(events.get_nowait())
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
                ref = task.options(**options).remote(job, events)
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
