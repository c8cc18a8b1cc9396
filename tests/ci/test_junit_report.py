"""JUnit reports: valid against the Jenkins xUnit plugin's schema, read back by a JUnit consumer with
the counts, reasons and details written, every text redacted and XML-safe, written atomically."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
import xmlschema

from lmi_build.artifact.ci_reports import verify_suite
from lmi_build.artifact.verify import CheckOutcome, VerifyReport
from lmi_build.core.types import PlanMessage
from lmi_build.planning.startup import Citation, RuleFinding, StartupOutcome
from lmi_build.reporting.junit import (
    Case,
    ReportPathError,
    Suite,
    check_report_path,
    report_xml,
    write_report,
)
from tests.junit_reading import SCHEMA, read_report

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789"


def _suite() -> Suite:
    return Suite(name="lmi-build matrix builds.toml", seconds=12.5,
                 timestamp=datetime(2026, 12, 2, 5, 0, 0, 123, tzinfo=timezone.utc), hostname="driver",
                 properties=[("matrix", "builds.toml")], cases=[
                     Case("hf-tiny-llama-tp1", "lmi-build.matrix.hf", 3.25,
                          output=[("status", "built"), ("artifact", "s3://bucket/cache/abc/")]),
                     Case("trtllm-tiny-llama-tp2", "lmi-build.matrix.trtllm", 1.0,
                          failure="step 'engine' failed (exit 1)", failure_type="failed",
                          failure_detail="step 'engine' failed (exit 1)\nlog: /tmp/x-engine.log on host-a"),
                     Case("neuronx-tiny-llama", "lmi-build.matrix.neuronx", skipped="interrupted before it started"),
                 ])


def test_a_report_is_valid_junit_and_reads_back_as_written(tmp_path: Path) -> None:
    path = write_report(tmp_path / "reports" / "junit.xml", [_suite()])  # the folder is created
    report, cases = read_report(path)
    assert (report.tests, report.failures, report.errors) == (3, 1, 0)
    assert [(case.name, case.outcome) for case in cases] == [
        ("hf-tiny-llama-tp1", "passed"), ("trtllm-tiny-llama-tp2", "failure"), ("neuronx-tiny-llama", "skipped")]
    built, failed, skipped = cases
    assert built.seconds == 3.25 and "artifact: s3://bucket/cache/abc/" in built.system_out
    assert failed.message == "step 'engine' failed (exit 1)" and "log: /tmp/x-engine.log on host-a" in (failed.text or "")
    assert skipped.message == "interrupted before it started"
    suite = next(iter(report))
    assert suite.skipped == 1 and suite.hostname == "driver" and suite.timestamp == "2026-12-02T05:00:00+00:00"


def test_the_schema_check_can_fail() -> None:
    """The schema is no rubber stamp: a test case without its name, or a suite without its counts, is refused."""
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate('<testsuites><testsuite name="s" tests="1" failures="0" errors="0"><testcase/></testsuite></testsuites>')
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate('<testsuites><testsuite name="s"/></testsuites>')


def test_texts_are_redacted_and_xml_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    hostile = f"download failed with {SECRET}\x1b[31m\x00 ]]> <tag> & \ud800"
    suite = Suite("s", [Case(hostile, "c", failure=hostile, output=[("error", hostile)])])
    data = report_xml([suite])
    assert SECRET.encode() not in data and b"\x1b" not in data and b"\x00" not in data
    path = tmp_path / "junit.xml"
    path.write_bytes(data)
    _, cases = read_report(path)  # parses: every character it holds is one XML 1.0 allows
    assert "\\x1b[31m" in (cases[0].message or "") and "<tag> &" in (cases[0].message or "")


def test_long_texts_are_bounded(tmp_path: Path) -> None:
    suite = Suite("s", [Case("c", "c", failure="x" * 1_000_000, failure_detail="y" * 1_000_000)])
    assert len(report_xml([suite])) < 20_000


def test_the_report_replaces_the_old_one_atomically(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text("old")
    write_report(path, [_suite()])
    assert read_report(path)[0].tests == 3
    assert sorted(os.listdir(tmp_path)) == ["junit.xml"]  # no temporary file left beside it


def test_a_report_is_never_written_into_the_artifact(tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    with pytest.raises(ReportPathError, match="inside the artifact"):
        check_report_path(artifact / "reports" / "junit.xml", outside=(artifact,))
    with pytest.raises(ReportPathError, match="is a directory"):
        check_report_path(tmp_path)
    check_report_path(tmp_path / "junit.xml", outside=(artifact,))


def test_verify_reports_the_containers_verdict_as_its_own_case(tmp_path: Path) -> None:
    cite = Citation(repo="deepjavalibrary/djl-serving", ref="0.30.0-dlc", path="tnx.py", lines="52")
    rejected = StartupOutcome(profile="lmi-0.30.0-neuronx", outcome="rejected", rules=(
        RuleFinding(rule="tnx.tp", effect="rejected", message="tp 3 does not divide 8 heads", cites=(cite,)),))
    broken = PlanMessage(code="file_size", message="a.bin is 3 bytes, the manifest says 4")
    report = VerifyReport(valid=False, errors=[broken], startup=rejected, checks=[
        CheckOutcome(name="manifest"), CheckOutcome(name="files", errors=[broken, broken]),
        CheckOutcome(name="layout", warnings=[PlanMessage(code="w", message="odd tokenizer")])])
    _, cases = read_report(write_report(tmp_path / "v.xml", [verify_suite("out/a", report)]))
    assert [(case.name, case.outcome) for case in cases] == [
        ("manifest", "passed"), ("files", "failure"), ("layout", "passed"),
        ("container start-up on lmi-0.30.0-neuronx", "failure")]
    assert cases[1].message == "a.bin is 3 bytes, the manifest says 4 (and 1 more)"
    assert "warning: odd tokenizer" in cases[2].system_out
    assert "tp 3 does not divide 8 heads" in (cases[3].message or "") and "tnx.py:52" in (cases[3].message or "")
