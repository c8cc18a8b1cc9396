"""A JUnit report as the CI servers read it: valid against the Jenkins xUnit plugin's schema
(tests/fixtures/junit), then parsed by junitparser, a JUnit consumer library."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import junitparser
import xmlschema

from tests.paths import REPO_ROOT

SCHEMA = xmlschema.XMLSchema(REPO_ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd")


@dataclass(frozen=True)
class ReadCase:
    name: str
    classname: str
    seconds: float
    outcome: str  # passed, failure, skipped
    message: str | None
    text: str | None
    system_out: str


def read_report(path: Path) -> tuple[junitparser.JUnitXml, list[ReadCase]]:
    """Validate ``path`` against the schema (raises on any violation), then read every test case."""
    SCHEMA.validate(str(path))
    report = junitparser.JUnitXml.fromfile(str(path))
    cases = []
    for suite in report:
        for case in suite:
            results = list(case.result)
            outcome = "passed" if not results else type(results[0]).__name__.lower()
            cases.append(ReadCase(name=case.name, classname=case.classname, seconds=case.time, outcome=outcome,
                                  message=results[0].message if results else None,
                                  text=results[0].text if results else None, system_out=case.system_out or ""))
    return report, cases
