"""What a matrix run shows: a live view of queued/running/finished builds (human mode, on stderr),
then one table (or ``--json``) with every build's key, status, host, seconds, URL and error."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lmi_build.fleet.job import SUCCESSFUL, BuildResult, Job, Started
from lmi_build.fleet.timeline import Span, TextGantt
from lmi_build.output import Output, identifier, printable

# The statuses of the live view, in the order it lists them.
LIVE_STATES = ("queued", "running", "cached", "built", "script", "stand_in", "checkpoint", "failed")
STATUS_STYLE = {"cached": "cyan", "built": "green", "script": "green", "stand_in": "yellow", "checkpoint": "yellow",
                "failed": "red"}


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

    def started(self, event: Started) -> None:
        if event.name in self.results:
            return
        self.state[event.name] = "running"
        self.host[event.name] = event.host
        self.since[event.name] = time.monotonic()
        self.starts[event.name] += 1

    def finished(self, result: BuildResult) -> None:
        self.results[result.name] = result
        self.state[result.name] = result.status
        self.ended[result.name] = time.monotonic()

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

    def render(self) -> RenderableType:
        counts = self.counts()
        summary = Text(f"{len(self.results)}/{len(self.jobs)} finished  ")
        for state in LIVE_STATES:
            if counts[state]:
                summary.append(f"{state} {counts[state]}  ", style=STATUS_STYLE.get(state, ""))
        running = Table(show_header=True, box=None, pad_edge=False)
        running.add_column("running", no_wrap=True)
        running.add_column("host", no_wrap=True)
        running.add_column("s", justify="right")
        now = time.monotonic()
        for name, state in self.state.items():
            if state == "running":
                # Cells as text, never markup; user text as printable (a name or host may hold "[...]" or escapes).
                running.add_row(identifier(name), identifier(self.host.get(name, "")), f"{now - self.since[name]:.0f}")
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
