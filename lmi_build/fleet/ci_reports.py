"""What a matrix run gives a CI besides its table: a JUnit report (one test case per build, or per
refused build when the matrix is invalid) and a GitHub step summary (the builds' table, what failed,
the timeline per host and each build's memory per device)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lmi_build.core.errors import LmiBuildError
from lmi_build.fleet.job import Job
from lmi_build.fleet.matrix import MatrixError
from lmi_build.fleet.report import MatrixProgress
from lmi_build.fleet.timeline import mermaid_gantt
from lmi_build.planning.memory_bar import device_memory, memory_markdown
from lmi_build.planning.plan import MemoryEstimate
from lmi_build.reporting import github, markdown
from lmi_build.reporting.junit import Case, Suite, check_report_path, write_report
from lmi_build.reporting.output import current, human_bytes
from lmi_build.targets import parse_plan_text

CLASSNAME = "lmi-build.matrix"
SUMMARY_MEMORY_BUILDS = 20  # the memory bars of a summary: the first builds' (a 1,000-build matrix stays readable)
SUMMARY_ROWS = 200  # builds listed in the summary's table


@dataclass(frozen=True)
class BuildFacts:
    """What a build's plan says about it, for its test case and its summary row."""

    model: str
    target: str
    tp: str
    quantize: str
    memory: MemoryEstimate | None


def build_facts(job: Job) -> BuildFacts:
    plan = parse_plan_text(job.saved_plan, f"the plan of {job.name}").plan
    tp = plan.build.summary()["tp"] if plan.build is not None else ""
    return BuildFacts(model=plan.model.id, target=plan.target, tp=tp, quantize=plan.quantization.method or "none",
                      memory=plan.memory)


def _case(progress: MatrixProgress, job: Job, interrupted: bool) -> Case:
    facts = build_facts(job)
    result = progress.results.get(job.name)
    lines: list[tuple[str, str]] = [("model", facts.model), ("target", facts.target), ("tp", facts.tp),
                                    ("quantize", facts.quantize), ("key", job.cache_key)]
    classname = f"{CLASSNAME}.{facts.target}"
    if result is None:
        running = progress.state[job.name] == "running"
        where = f" on {progress.host.get(job.name, '')}" if running else ""
        if not interrupted:
            return Case(job.name, classname, failure="no result came back", failure_type="no_result", output=lines)
        if running:
            return Case(job.name, classname, failure=f"interrupted while it ran{where}", failure_type="interrupted",
                        output=[("status", "interrupted"), *lines])
        return Case(job.name, classname, skipped="interrupted before it started", output=lines)
    lines = [("status", result.status), ("cache", "hit" if result.status == "cached" else "miss"), *lines,
             ("host", result.host), ("attempts", str(max(1, progress.starts[job.name])))]
    lines += [(label, value) for label, value in (("artifact", result.artifact_url), ("size", _size(result.total_bytes)),
                                                  ("kept", result.kept), ("next", result.next_command),
                                                  ("log", result.log)) if value]
    if result.status == "failed" or result.status == "stand_in":
        reason = result.error or "failed"
        detail = reason + (f"\nlog: {result.log} on {result.host}" if result.log else "")
        return Case(job.name, classname, result.seconds, failure=reason, failure_type=result.status,
                    failure_detail=detail, output=lines)
    if result.status == "checkpoint":  # exit 3: kept for a GPU host, not an artifact yet
        return Case(job.name, classname, result.seconds, skipped=f"stopped at its checkpoint; next: {result.next_command}",
                    output=lines)
    return Case(job.name, classname, result.seconds, output=lines)


def _size(total: int | None) -> str | None:
    return None if total is None else f"{human_bytes(total)} ({total:,} bytes)"


def matrix_suite(progress: MatrixProgress, matrix_file: Path, *, interrupted: bool = False,
                 started: datetime | None = None) -> Suite:
    """One test case per build; a build without a result failed, or (interrupted) was stopped."""
    cases = [_case(progress, job, interrupted) for job in progress.jobs]
    seconds = float(progress.to_json()["seconds"])
    return Suite(name=f"lmi-build matrix {matrix_file.name}", cases=cases, seconds=seconds, timestamp=started,
                 properties=[("matrix", str(matrix_file))])


_LABEL = re.compile(r"^(build\[\d+\](?: \(.*?\))?): (.*)$", re.DOTALL)


def refused_suite(matrix_file: Path, error: MatrixError, *, started: datetime | None = None) -> Suite:
    """The invalid matrix (exit 2) or the builds that could not be planned (exit 1): one failed case
    per refused build (its problems, one per line), and one for the file's own problems."""
    problems: dict[str, list[str]] = {}
    for problem in error.problems:
        found = _LABEL.match(problem)
        label, text = (found.group(1), found.group(2)) if found else (matrix_file.name, problem)
        problems.setdefault(label, []).append(text)
    def in_file_order(label: str) -> int:  # the file's own problems, then build[0], build[1], ...
        found = re.match(r"build\[(\d+)\]", label)
        return int(found.group(1)) if found else -1

    cases = [Case(label, f"{CLASSNAME}.refused", failure=texts[0] if len(texts) == 1 else
                  f"{texts[0]} (and {len(texts) - 1} more)", failure_type=error.code,
                  failure_detail="\n".join(texts) + f"\n{error.one_line()}")
             for label, texts in sorted(problems.items(), key=lambda item: in_file_order(item[0]))]
    return Suite(name=f"lmi-build matrix {matrix_file.name}", cases=cases, timestamp=started,
                 properties=[("matrix", str(matrix_file))])


def matrix_summary(progress: MatrixProgress, matrix_file: Path, *, interrupted: bool = False) -> str:
    """The step summary of a matrix run (GitHub-flavoured Markdown)."""
    data = progress.to_json()
    counts = ", ".join(f"{n} {status}" for status, n in sorted(data["counts"].items()))
    parts = [f"## lmi-build matrix {markdown.code(matrix_file.name)}: {markdown.text(counts)} in {data['seconds']:.1f} s"
             + (" (interrupted)" if interrupted else "") + "\n"]
    rows = [[markdown.code(build["name"]), markdown.text(build["status"]), f"{build['seconds']:.1f} s",
             "hit" if build["status"] == "cached" else "miss", human_bytes(build["total_bytes"])
             if build["total_bytes"] is not None else "", markdown.code(build["artifact_url"] or "")]
            for build in data["builds"][:SUMMARY_ROWS]]
    parts.append(markdown.table(["build", "status", "time", "cache", "size", "artifact"], rows, right=(2, 4)))
    if len(data["builds"]) > SUMMARY_ROWS:
        parts.append(f"… and {len(data['builds']) - SUMMARY_ROWS:,} more builds (the JSON or JUnit report lists all)\n")
    failed = [build for build in data["builds"] if build["status"] in ("failed", "stand_in")]
    if failed:
        parts.append("### What failed\n")
        parts += [f"- {markdown.code(build['name'])}: {markdown.text(build['error'] or 'failed')}"
                  + (f" (log {markdown.code(build['log'])} on {markdown.code(build['host'])})" if build["log"] else "")
                  for build in failed[:SUMMARY_ROWS]]
        parts.append("")
    spans = progress.spans()
    if spans:
        parts.append("### Timeline per host\n")
        parts.append(mermaid_gantt(spans))
    parts += _memory_parts(progress.jobs)
    return "\n".join(parts)


def _memory_parts(jobs: list[Job]) -> list[str]:
    shown = [(job.name, facts.memory) for job in jobs[:SUMMARY_MEMORY_BUILDS]
             if (facts := build_facts(job)).memory is not None]
    if not shown:
        return []
    parts = ["### Memory per device (the plans' estimates)\n"]
    parts += [memory_markdown(device_memory(memory), name) for name, memory in shown if memory is not None]
    if len(jobs) > SUMMARY_MEMORY_BUILDS:
        parts.append(f"(the first {SUMMARY_MEMORY_BUILDS} builds' plans)\n")
    return parts


def refused_summary(matrix_file: Path, error: MatrixError) -> str:
    """The step summary of a matrix that did not run: every problem."""
    lines = [f"## lmi-build matrix {markdown.code(matrix_file.name)}: {markdown.text(error.message)}\n",
             "### What failed\n"]
    lines += [f"- {markdown.text(problem)}" for problem in error.problems[:SUMMARY_ROWS]]
    if error.hint:
        lines.append(f"\n{markdown.text(error.hint)}")
    return "\n".join(lines) + "\n"


class MatrixReports:
    """The reports a matrix command writes, whatever way it ends: ``--junit-xml`` and, under GitHub
    Actions, the step summary. ``hold`` receives the run's progress once every build is planned, so an
    interrupted run still reports what it did."""

    def __init__(self, matrix_file: Path, junit_xml: Path | None) -> None:
        self.matrix_file = matrix_file
        self.junit_xml = junit_xml
        self.progress: MatrixProgress | None = None
        self.started = datetime.now().astimezone()
        if junit_xml is not None:
            check_report_path(junit_xml)

    def hold(self, progress: MatrixProgress) -> None:
        self.progress = progress

    def finished(self, progress: MatrixProgress) -> None:
        self._write(lambda: matrix_suite(progress, self.matrix_file, started=self.started),
                    lambda: matrix_summary(progress, self.matrix_file))

    def refused(self, error: MatrixError) -> None:
        self._write(lambda: refused_suite(self.matrix_file, error, started=self.started),
                    lambda: refused_summary(self.matrix_file, error), quiet_failure=True)

    def failed(self, error: LmiBuildError) -> None:
        """The run stopped on an error of its own (the cache bucket unreachable, a publish bucket that
        takes no write): the builds without a result fail, or the one case says why nothing ran."""
        progress = self.progress
        if progress is not None:
            self._write(lambda: matrix_suite(progress, self.matrix_file, started=self.started),
                        lambda: matrix_summary(progress, self.matrix_file), quiet_failure=True)
            return
        reason = error.one_line()
        suite = Suite(name=f"lmi-build matrix {self.matrix_file.name}", timestamp=self.started,
                      cases=[Case(self.matrix_file.name, f"{CLASSNAME}.refused", failure=reason, failure_type=error.code)])
        self._write(lambda: suite, lambda: f"## lmi-build matrix {markdown.code(self.matrix_file.name)}: "
                    f"{markdown.text(reason)}\n", quiet_failure=True)

    def interrupted(self) -> None:
        progress = self.progress
        if progress is None:  # stopped while planning: nothing ran, and no build can be named
            return
        self._write(lambda: matrix_suite(progress, self.matrix_file, interrupted=True, started=self.started),
                    lambda: matrix_summary(progress, self.matrix_file, interrupted=True), quiet_failure=True)

    def _write(self, suite: Callable[[], Suite], summary: Callable[[], str], *, quiet_failure: bool = False) -> None:
        """Write both; on the way out of a failure (``quiet_failure``) a report that cannot be written
        is a warning, so the run's own error stays the one reported."""
        out = current()
        try:
            if self.junit_xml is not None:
                write_report(self.junit_xml, [suite()])
                out.info(f"JUnit report: {self.junit_xml}")
            github.append_summary(summary())
        except OSError as error:
            if not quiet_failure:
                raise
            out.warn(f"the report could not be written ({error.strerror or error})")
