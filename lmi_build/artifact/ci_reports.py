"""What ``verify`` gives a CI besides its lines: a JUnit report (one test case per check: the
manifest, the files, serving.properties, the layout, the serving target, the container's start-up
verdict) and a GitHub step summary of the same."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lmi_build.artifact.verify import CheckOutcome, VerifyReport
from lmi_build.core.errors import with_hint
from lmi_build.core.types import PlanMessage
from lmi_build.reporting import markdown
from lmi_build.reporting.junit import Case, Suite
from lmi_build.reporting.output import human_bytes

CLASSNAME = "lmi-build.verify"
SHOWN_FINDINGS = 50  # a check's findings in its failure text (a tampered manifest of 200k entries is not 200k lines)


def _lines(messages: Sequence[PlanMessage]) -> str:
    shown = [with_hint(message.message, message.hint) for message in messages[:SHOWN_FINDINGS]]
    more = len(messages) - SHOWN_FINDINGS
    return "\n".join([*shown, *([f"… and {more:,} more (--json lists every one)"] if more > 0 else [])])


def _check_case(check: CheckOutcome) -> Case:
    output = [("warning", with_hint(message.message, message.hint)) for message in check.warnings[:SHOWN_FINDINGS]]
    if not check.errors:
        return Case(check.name, CLASSNAME, output=output)
    first = with_hint(check.errors[0].message, check.errors[0].hint)
    reason = first if len(check.errors) == 1 else f"{first} (and {len(check.errors) - 1:,} more)"
    return Case(check.name, CLASSNAME, failure=reason, failure_type=check.errors[0].code,
                failure_detail=_lines(check.errors), output=output)


def verify_suite(location: str, report: VerifyReport, *, started: datetime | None = None, seconds: float = 0.0) -> Suite:
    cases = [_check_case(check) for check in report.checks]
    if report.startup is not None:
        startup = report.startup
        name = f"container start-up on {startup.profile}"
        output = [("outcome", startup.outcome), ("loader", startup.loader or "unknown")]
        cases.append(Case(name, CLASSNAME, output=output) if startup.outcome == "loads" else
                     Case(name, CLASSNAME, failure=startup.summary(), failure_type=startup.outcome, output=output))
    return Suite(name=f"lmi-build verify {location}", cases=cases, seconds=seconds, timestamp=started,
                 properties=[("location", location)])


def error_suite(location: str, code: str, message: str, *, started: datetime | None = None) -> Suite:
    """``verify`` could not check the artifact at all (not there, an unfinished build): one failed case."""
    return Suite(name=f"lmi-build verify {location}", timestamp=started, properties=[("location", location)],
                 cases=[Case("verify", CLASSNAME, failure=message, failure_type=code)])


def verify_summary(location: str, report: VerifyReport) -> str:
    verdict = "valid" if report.valid else f"invalid, {len(report.errors):,} error(s)"
    artifact = report.artifact
    head = f"## lmi-build verify {markdown.code(location)}: {verdict}\n"
    size = f"{artifact.get('target')} / {artifact.get('layout')}, {artifact.get('files')} files, " \
        f"{human_bytes(int(artifact['total_bytes']))}" if isinstance(artifact.get("total_bytes"), int) else ""
    rows = [[markdown.text(check.name), "passed" if not check.errors else "**failed**",
             str(len(check.errors)), str(len(check.warnings))] for check in report.checks]
    if report.startup is not None:
        rows.append([markdown.text(f"container start-up on {report.startup.profile}"),
                     markdown.text(report.startup.outcome), "", ""])
    parts = [head, markdown.text(size) + "\n" if size else "",
             markdown.table(["check", "verdict", "errors", "warnings"], rows, right=(2, 3))]
    if report.errors:
        parts.append("### What failed\n")
        parts += [f"- {markdown.text(with_hint(message.message, message.hint))}"
                  for message in report.errors[:SHOWN_FINDINGS]]
    return "\n".join(part for part in parts if part) + "\n"
