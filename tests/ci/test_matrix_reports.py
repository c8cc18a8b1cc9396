"""A matrix run's reports from its real jobs (planned, not built: no S3, no builds): the JUnit
report of finished, failed, interrupted and refused builds, and the step summary read by a
Markdown renderer (markdown_it, rich's own)."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from lmi_build.core.errors import LmiBuildError
from lmi_build.fleet.ci_reports import MatrixReports, matrix_suite, matrix_summary, refused_suite
from lmi_build.fleet.job import BuildResult, Job, Started
from lmi_build.fleet.matrix import MatrixError, plan_matrix
from lmi_build.fleet.report import MatrixProgress
from lmi_build.reporting.junit import write_report
from tests.junit_reading import read_report

MATRIX = """
[defaults]
model = "demo:tiny-llama"
max_input_len = 256
max_output_len = 128

[[build]]
target = "hf"
[build.matrix]
dtype = ["fp16", "bf16", "fp32"]

[[build]]
target = "trtllm"
tp = 2
instance_type = "g5.12xlarge"
"""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[Job]:
    path = tmp_path_factory.mktemp("matrix") / "builds.toml"
    path.write_text(MATRIX, encoding="utf-8")
    return plan_matrix(path, cache="s3://bucket/cache")


def _progress(jobs: list[Job]) -> MatrixProgress:
    """Four builds on two hosts: built, cached, failed (with its log kept), and one still running."""
    progress = MatrixProgress(jobs)
    built, cached, failed, running = (job.name for job in jobs)
    base = progress.started_at
    for name, host, start in ((built, "host-a", 0.0), (cached, "host-b", 1.0), (failed, "host-b", 2.0),
                              (running, "host-a", 9.0)):
        progress.started(Started(name=name, host=host))
        progress.since[name] = base + start
    results = [BuildResult(name=built, cache_key="k", status="built", host="host-a", seconds=8.0,
                           artifact_url="s3://bucket/cache/a/", total_bytes=6_356_650),
               BuildResult(name=cached, cache_key="k", status="cached", host="host-b", seconds=0.5,
                           artifact_url="s3://bucket/cache/b/", total_bytes=6_356_650),
               BuildResult(name=failed, cache_key="k", status="failed", host="host-b", seconds=3.0,
                           error="step 'convert' failed (exit 1); last lines: boom | x", log="/tmp/f-convert.log")]
    for result, end in zip(results, (8.0, 1.5, 5.0), strict=True):
        progress.finished(result)
        progress.ended[result.name] = base + end
    return progress


def test_a_matrix_report_has_a_case_per_build(jobs: list[Job], tmp_path: Path) -> None:
    progress = _progress(jobs)
    path = write_report(tmp_path / "junit.xml", [matrix_suite(progress, Path("builds.toml"), interrupted=True)])
    report, cases = read_report(path)
    assert (report.tests, report.failures) == (4, 2)
    by_name = {case.name: case for case in cases}
    built, cached, failed, running = (by_name[job.name] for job in jobs)
    assert built.outcome == "passed" and built.seconds == 8.0 and built.classname == "lmi-build.matrix.hf"
    assert "artifact: s3://bucket/cache/a/" in built.system_out and "cache: miss" in built.system_out
    assert "model: demo:tiny-llama" in built.system_out and "tp: 1" in built.system_out
    assert "quantize: none" in built.system_out and "size: 6.1 MiB (6,356,650 bytes)" in built.system_out
    assert cached.outcome == "passed" and "cache: hit" in cached.system_out
    assert failed.outcome == "failure" and failed.message == "step 'convert' failed (exit 1); last lines: boom | x"
    assert "log: /tmp/f-convert.log on host-b" in (failed.text or "")
    assert running.outcome == "failure" and running.message == "interrupted while it ran on host-a"
    assert "tp: 2" in running.system_out and running.classname == "lmi-build.matrix.trtllm"


def test_queued_builds_of_an_interrupted_run_are_skipped(jobs: list[Job], tmp_path: Path) -> None:
    path = write_report(tmp_path / "junit.xml", [matrix_suite(MatrixProgress(jobs), Path("b.toml"), interrupted=True)])
    report, cases = read_report(path)
    assert report.tests == 4 and report.failures == 0
    assert {case.outcome for case in cases} == {"skipped"}


def test_an_invalid_matrix_reports_each_refused_build(tmp_path: Path) -> None:
    path = tmp_path / "builds.toml"
    path.write_text('[[build]]\ntarget = "hf"\nmodel = "demo:tiny-llama"\n[build.matrix]\ntp = [3, 1]\n\n'
                    '[[build]]\nmodel = "demo:tiny-llama"\n', encoding="utf-8")
    with pytest.raises(MatrixError) as caught:
        plan_matrix(path, cache=None)
    report, cases = read_report(write_report(tmp_path / "junit.xml", [refused_suite(path, caught.value)]))
    assert report.failures == report.tests == len(cases) >= 2
    assert [case.name for case in cases][-1] == "build[1]"
    assert all(case.outcome == "failure" and case.message for case in cases)
    assert any(case.name == "build[0] (tp=3)" for case in cases)


def _cells(html_tokens: list) -> list[str]:  # type: ignore[type-arg]
    return [token.content for token in html_tokens if token.type == "inline"]


def test_the_step_summary_renders_its_table_timeline_and_memory(jobs: list[Job]) -> None:
    text = matrix_summary(_progress(jobs), Path("builds.toml"))
    parser = MarkdownIt("commonmark").enable("table")
    html = parser.render(text)
    built, cached, failed, _ = (job.name for job in jobs)
    assert f"<td><code>{built}</code></td>\n<td>built</td>\n<td style=\"text-align:right\">8.0 s</td>\n" \
           f"<td>miss</td>\n<td style=\"text-align:right\">6.1 MiB</td>\n<td><code>s3://bucket/cache/a/</code></td>" in html
    assert f"<td><code>{cached}</code></td>\n<td>cached</td>" in html and "<td>hit</td>" in html
    assert "<h3>What failed</h3>" in html and "boom | x" in html and "/tmp/f-convert.log" in html
    fences = [token for token in parser.parse(text) if token.type == "fence"]
    assert [fence.info for fence in fences] == ["mermaid"]
    gantt = fences[0].content.splitlines()
    assert gantt[0] == "gantt" and "    dateFormat X" in gantt
    assert gantt.index("    section host-a") < gantt.index("    section host-b")
    assert f"    {built} (built, 8.0 s) :done, 0, 8" in gantt
    assert f"    {failed} (failed, 3.0 s) :crit, 2, 5" in gantt
    assert "<strong>trtllm-tiny-llama</strong>" in html  # its memory bar: the one plan with an instance type
    assert "<td>KV cache</td>" in html and "<td>free</td>" in html and "<td>weights</td>" in html


def test_an_interrupted_run_still_writes_its_reports(jobs: list[Job], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    junit = tmp_path / "junit.xml"
    reports = MatrixReports(Path("builds.toml"), junit)
    reports.interrupted()  # stopped while planning: no build to name, nothing written
    assert not junit.exists() and not (tmp_path / "summary.md").exists()
    reports.hold(_progress(jobs))
    reports.interrupted()
    report, cases = read_report(junit)
    assert report.tests == 4 and [case.outcome for case in cases].count("failure") == 2
    assert "(interrupted)" in (tmp_path / "summary.md").read_text(encoding="utf-8")


def test_a_run_stopped_by_its_own_error_reports_it(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    MatrixReports(Path("builds.toml"), junit).failed(
        LmiBuildError("the cache bucket s3://b/ cannot be reached", hint="check --endpoint-url"))
    report, cases = read_report(junit)
    assert report.failures == report.tests == 1
    assert cases[0].message == "the cache bucket s3://b/ cannot be reached (check --endpoint-url)"
