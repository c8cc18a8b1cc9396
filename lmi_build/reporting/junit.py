"""JUnit XML reports, the format Jenkins, GitLab (``artifacts:reports:junit``), GitHub test
reporters, Buildkite and CircleCI read. Written with the standard library's ElementTree (never by
string formatting) in the shape of the Jenkins xUnit plugin's ``junit-10.xsd`` (the tests validate
every report against it): ``testsuites`` > ``testsuite`` > ``testcase`` with at most a ``failure``
or ``skipped``, and the details a test case has no attribute for in its ``system-out``.

Every text is redacted (a credential in an error never reaches the CI server) and bounded, and
characters XML 1.0 cannot hold (control characters a vendor log may print) are written as escapes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from lmi_build.core.errors import MESSAGE_CHARS, LmiBuildError, bounded
from lmi_build.core.fs import atomic_write_bytes
from lmi_build.core.redaction import environment_secrets, redact_text

# What XML 1.0 cannot hold: C0 controls but tab, LF and CR, lone surrogates, U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
SYSTEM_OUT_CHARS = 4 * MESSAGE_CHARS


@dataclass(frozen=True)
class Case:
    """One test case: a build of a matrix, a check of ``verify``. ``failure`` is its one-line reason
    (``failure_detail`` the text under it: the log's path); ``skipped`` one that never ran."""

    name: str
    classname: str
    seconds: float = 0.0
    failure: str | None = None
    failure_type: str = "failure"
    failure_detail: str = ""
    skipped: str | None = None
    output: Sequence[tuple[str, str]] = ()  # "label: value" lines of system-out (status, artifact URL, ...)


@dataclass(frozen=True)
class Suite:
    name: str
    cases: Sequence[Case]
    seconds: float = 0.0
    timestamp: datetime | None = None
    hostname: str | None = None
    properties: Sequence[tuple[str, str]] = field(default_factory=tuple)

    @property
    def failures(self) -> int:
        return sum(case.failure is not None for case in self.cases)

    @property
    def skipped(self) -> int:
        return sum(case.failure is None and case.skipped is not None for case in self.cases)


class _Texts:
    """Every text of one report, redacted with the environment's credentials as they were when it was written."""

    def __init__(self) -> None:
        self.secrets = environment_secrets()

    def __call__(self, value: str, limit: int = MESSAGE_CHARS) -> str:
        shown = redact_text(bounded(value, limit), self.secrets)
        return _NOT_XML.sub(lambda found: found.group().encode("unicode_escape", "backslashreplace").decode("ascii"),
                            shown)


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def _case_element(case: Case, text: _Texts) -> ElementTree.Element:
    element = ElementTree.Element("testcase", name=text(case.name), classname=text(case.classname),
                                  time=_seconds(case.seconds))
    if case.failure is not None:
        failure = ElementTree.SubElement(element, "failure", message=text(case.failure), type=text(case.failure_type))
        failure.text = text(case.failure_detail or case.failure, SYSTEM_OUT_CHARS)
    elif case.skipped is not None:
        ElementTree.SubElement(element, "skipped", message=text(case.skipped))
    if case.output:
        out = ElementTree.SubElement(element, "system-out")
        out.text = text("\n".join(f"{label}: {value}" for label, value in case.output) + "\n", SYSTEM_OUT_CHARS)
    return element


def _suite_element(suite: Suite, text: _Texts) -> ElementTree.Element:
    attributes = {"name": text(suite.name), "tests": str(len(suite.cases)), "failures": str(suite.failures),
                  "errors": "0", "skipped": str(suite.skipped), "time": _seconds(suite.seconds)}
    if suite.timestamp is not None:
        attributes["timestamp"] = suite.timestamp.replace(microsecond=0).isoformat()
    if suite.hostname:
        attributes["hostname"] = text(suite.hostname)
    element = ElementTree.Element("testsuite", attributes)
    if suite.properties:
        properties = ElementTree.SubElement(element, "properties")
        for name, value in suite.properties:
            ElementTree.SubElement(properties, "property", name=text(name), value=text(value))
    element.extend(_case_element(case, text) for case in suite.cases)
    return element


def report_xml(suites: Iterable[Suite], name: str = "lmi-build") -> bytes:
    """The report as an XML document (UTF-8, with its declaration)."""
    text = _Texts()
    listed = list(suites)
    root = ElementTree.Element("testsuites", name=text(name), tests=str(sum(len(s.cases) for s in listed)),
                               failures=str(sum(s.failures for s in listed)), errors="0",
                               time=_seconds(sum(s.seconds for s in listed)))
    root.extend(_suite_element(suite, text) for suite in listed)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


class ReportPathError(LmiBuildError):
    code = "report_path"


def check_report_path(path: Path, *, outside: Sequence[Path] = ()) -> None:
    """Refuse a report path that is a directory or lies inside ``outside`` (an artifact: a file
    written there would change what its manifest describes)."""
    if path.is_dir():
        raise ReportPathError(f"--junit-xml {path} is a directory", hint="name a file, e.g. reports/lmi-build.xml")
    resolved = path.resolve()
    for directory in outside:
        if resolved.is_relative_to(directory.resolve()):
            raise ReportPathError(f"--junit-xml {path} lies inside the artifact {directory}",
                                  hint="write the report outside the artifact, e.g. reports/lmi-build.xml")


def write_report(path: Path, suites: Iterable[Suite], name: str = "lmi-build") -> Path:
    """Write the report atomically (a temporary file beside ``path``, then a rename): a CI reading
    it never sees half a file, and a failed write leaves the previous report."""
    return atomic_write_bytes(path, report_xml(suites, name))
