"""What a matrix run shows: a live view of queued/running/finished builds (human mode, on stderr),
then one table (or ``--json``) with every build's key, status, host, seconds, URL and error."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lmi_build.fleet.job import SUCCESSFUL, BuildResult, Job, Started
from lmi_build.fleet.timeline import Span, TextGantt
from lmi_build.reporting.output import Output, identifier, printable

# The statuses of the live view, in the order it lists them.
LIVE_STATES = ("queued", "running", "cached", "built", "script", "stand_in", "checkpoint", "failed")
STATUS_STYLE = {"cached": "cyan", "built": "green", "script": "green", "stand_in": "yellow", "checkpoint": "yellow",
                "failed": "red"}


@dataclass(frozen=True)
class RunningStep:
    """The step a running build is in: its name, the plan's estimate of its seconds, when it began."""

    name: str
    estimate_s: float | None
    since: float  # time.monotonic() on the driver

    def left(self, now: float) -> str:
        """The estimate minus the time in the step ("~3m 20s"); "?" without an estimate; "overdue"
        past it (an estimate is never shown as negative time)."""
        if self.estimate_s is None:
            return "?"
        remaining = self.estimate_s - (now - self.since)
        if remaining < 0:
            return "overdue"
        minutes, seconds = divmod(round(remaining), 60)
        return f"~{minutes}m {seconds:02d}s" if minutes else f"~{seconds}s"


class MatrixProgress:
    """The state of every job, fed by the executor's callbacks."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)
        self.state: dict[str, str] = {job.name: "queued" for job in jobs}
        self.host: dict[str, str] = {}
        self.since: dict[str, float] = {}
        self.starts: Counter[str] = Counter()  # more than one: Ray re-ran it after losing a worker
        self.results: dict[str, BuildResult] = {}
        self.ended: dict[str, float] = {}  # when each result came back (the timeline's ends)
        self.started_at = time.monotonic()
        self.steps: dict[str, RunningStep] = {}  # the step each running build is in, from its events

    def started(self, event: Started, now: float | None = None) -> None:
        if event.name in self.results:
            return
        self.state[event.name] = "running"
        self.host[event.name] = event.host
        self.since[event.name] = time.monotonic() if now is None else now
        self.steps.pop(event.name, None)  # a build run again starts from its first step
        self.starts[event.name] += 1

    def finished(self, result: BuildResult) -> None:
        self.results[result.name] = result
        self.state[result.name] = result.status
        self.steps.pop(result.name, None)
        self.ended[result.name] = time.monotonic()

    def event(self, name: str, event: dict[str, Any], now: float | None = None) -> None:
        """One event of a running build (``lmi_build.reporting.events``): a step's start or end."""
        if name in self.results:
            return
        kind, step = event.get("type"), event.get("step")
        if kind == "step_start" and isinstance(step, str):
            estimate = event.get("estimate_s")
            self.steps[name] = RunningStep(step, float(estimate) if isinstance(estimate, (int, float)) else None,
                                           time.monotonic() if now is None else now)
        elif kind == "step_end" and name in self.steps and self.steps[name].name == step:
            del self.steps[name]

    @property
    def succeeded(self) -> bool:
        return len(self.results) == len(self.jobs) and all(r.status in SUCCESSFUL for r in self.results.values())

    @property
    def stopped_only(self) -> bool:
        """Every build succeeded or stopped with its checkpoint kept for a GPU host (exit 3, as a
        single build that stopped there), at least one of them stopped."""
        statuses = [r.status for r in self.results.values()]
        return len(self.results) == len(self.jobs) and "checkpoint" in statuses \
            and all(status in SUCCESSFUL | {"checkpoint"} for status in statuses)

    def counts(self) -> Counter[str]:
        return Counter(self.state.values())

    def render(self, now: float | None = None) -> RenderableType:
        """The live view at ``now`` (``time.monotonic()``): the counts, then each running build with
        its host, seconds, current step and that step's time left (issue 42: none was shown)."""
        counts = self.counts()
        summary = Text(f"{len(self.results)}/{len(self.jobs)} finished  ")
        for state in LIVE_STATES:
            if counts[state]:
                summary.append(f"{state} {counts[state]}  ", style=STATUS_STYLE.get(state, ""))
        running = Table(show_header=True, box=None, pad_edge=False)
        running.add_column("running", no_wrap=True)
        running.add_column("host", no_wrap=True)
        running.add_column("s", justify="right")
        running.add_column("step", no_wrap=True)
        running.add_column("left", justify="right", no_wrap=True)
        now = time.monotonic() if now is None else now
        for name, state in self.state.items():
            if state == "running":
                step = self.steps.get(name)
                # Cells as text, never markup; user text as printable (a name or host may hold "[...]" or escapes).
                running.add_row(identifier(name), identifier(self.host.get(name, "")), f"{now - self.since[name]:.0f}",
                                identifier(step.name) if step else "", step.left(now) if step else "")
        return Group(summary, running) if running.row_count else summary

    @contextmanager
    def live(self, output: Output) -> Iterator[None]:
        """The live view on stderr in human mode; nothing otherwise (json, quiet, not a terminal:
        rich then prints only the final state)."""
        if not output.human:
            yield
            return
        with Live(get_renderable=self.render, console=output.err, refresh_per_second=4, transient=True):
            yield

    def to_json(self) -> dict[str, Any]:
        builds = []
        for job in self.jobs:
            result = self.results.get(job.name) or BuildResult(name=job.name, cache_key=job.cache_key,
                                                                 status="failed", error="no result")
            builds.append({"name": job.name, "target": job.target, "key": job.cache_key, "status": result.status,
                           "host": result.host, "seconds": result.seconds, "artifact_url": result.artifact_url,
                           "error": result.error, "attempts": max(1, self.starts[job.name]),
                           "kept": result.kept, "next_command": result.next_command,
                           "total_bytes": result.total_bytes, "log": result.log})
        counts = Counter(build["status"] for build in builds)
        return {"succeeded": self.succeeded, "seconds": round(time.monotonic() - self.started_at, 3),
                "counts": dict(counts), "builds": builds}

    def table(self) -> RenderableType:
        """The builds as a table of short cells, then each build's artifact URL or error on a line of
        its own: a URL folded into a table cell at 80 columns could not be copied whole."""
        data = self.to_json()
        counts = ", ".join(f"{n} {status}" for status, n in sorted(data["counts"].items()))
        table = Table(title=f"lmi-build matrix: {counts} in {data['seconds']:.1f} s", show_header=True)
        for column in ("build", "status", "host", "seconds", "key"):
            table.add_column(column, no_wrap=column != "host", justify="right" if column == "seconds" else "left")
        details: list[Text] = []
        for build in data["builds"]:
            status = Text(build["status"], style=STATUS_STYLE.get(build["status"], ""))
            table.add_row(identifier(build["name"]), status, identifier(build["host"]), f"{build['seconds']:.1f}",
                          build["key"].partition(":")[2][:12])
            detail = build["error"] or build["artifact_url"]
            if build["kept"]:  # what the GPU stage needs, where it is, and how to finish it
                detail = f"{detail}; kept at {build['kept']} on {build['host']}; next: {build['next_command']}"
            if detail:
                line = Text(f"{printable(build['name'])}: ", style=STATUS_STYLE.get(build["status"], ""))
                line.append(printable(detail))  # plain text: an error may hold "[...]"
                details.append(line)
        return Group(table, *details, TextGantt(self.spans()))

    def spans(self) -> list[Span]:
        """Each build that started or finished, on its host's lane of the timeline (a running one
        ends now). A build a worker reported without its start began its own seconds before its end."""
        now = time.monotonic()
        spans = []
        for job in self.jobs:
            result, end = self.results.get(job.name), self.ended.get(job.name, now)
            if result is None and job.name not in self.since:
                continue
            start = self.since.get(job.name, end - (result.seconds if result is not None else 0.0))
            spans.append(Span(lane=(result.host if result is not None else "") or self.host.get(job.name, ""),
                              name=job.name, start=max(0.0, start - self.started_at),
                              end=max(0.0, end - self.started_at), status=self.state[job.name]))
        return spans
