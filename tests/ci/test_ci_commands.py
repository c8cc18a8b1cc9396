"""The commands as a CI job runs them: ``matrix --junit-xml`` of an invalid matrix (exit 2; no S3 is
reached: planning refuses it first) with its annotations on the matrix file's lines and its step
summary, and ``verify --junit-xml`` of a valid and a tampered artifact."""

from __future__ import annotations

import os
import re
from pathlib import Path

from markdown_it import MarkdownIt

from lmi_build.building.context import BuildOutcome
from lmi_build.cli.build_summary import build_summary
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import make_plan
from tests.junit_reading import read_report

INVALID = """[defaults]
model = "demo:tiny-llama"

[[build]]
target = "hf"
[build.matrix]
tp = [3, 1]

[[build]]
target = "hf"
dtype = "fp16"
bogus_key = 1
"""


def _actions_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
            "GITHUB_WORKSPACE": str(tmp_path)}


def test_an_invalid_matrix_writes_its_report_annotations_and_summary(tmp_path: Path) -> None:
    matrix = tmp_path / "ci" / "builds.toml"
    matrix.parent.mkdir()
    matrix.write_text(INVALID, encoding="utf-8")
    junit = tmp_path / "reports" / "lmi-build.xml"
    result = run_lmi_build("matrix", str(matrix), "--cache", "s3://bucket/cache", "--junit-xml", str(junit),
                           env=_actions_env(tmp_path), timeout=120)
    assert result.returncode == 2, result.stderr
    report, cases = read_report(junit)
    assert report.tests == report.failures == 2
    assert [case.name for case in cases] == ["build[0] (tp=3)", "build[1]"]
    assert "bogus_key" in (cases[1].message or "") and cases[1].classname == "lmi-build.matrix.refused"
    annotations = [line for line in result.stderr.splitlines() if line.startswith("::error ")]
    assert any(line.startswith("::error title=lmi-build%3A invalid_matrix,file=ci/builds.toml,line=4::build[0] (tp=3)")
               for line in annotations), annotations
    assert any(",file=ci/builds.toml,line=9::build[1]: " in line for line in annotations), annotations
    html = MarkdownIt("commonmark").enable("table").render((tmp_path / "summary.md").read_text(encoding="utf-8"))
    assert "<h3>What failed</h3>" in html and "bogus" in html
    assert result.stdout == ""  # nothing else changes: the human result stays on stderr


def test_verify_reports_a_case_per_check(hf_artifact: Path, tmp_path: Path) -> None:
    junit = tmp_path / "verify.xml"
    valid = run_lmi_build("verify", str(hf_artifact), "--for-container", "lmi-0.35.0-vllm-0.11.1", "--gpu", "sm90",
                          "--junit-xml", str(junit), env=_actions_env(tmp_path))
    assert valid.returncode == 0, valid.stderr
    report, cases = read_report(junit)
    assert report.failures == 0
    assert [case.name for case in cases] == ["manifest", "files", "serving.properties", "records", "layout",
                                             "compatibility with container lmi-0.35.0-vllm-0.11.1, sm90"]
    config = hf_artifact / "config.json"
    config.write_text(config.read_text(encoding="utf-8") + " ", encoding="utf-8")
    invalid = run_lmi_build("verify", str(hf_artifact), "--junit-xml", str(junit), "--json")
    assert invalid.returncode == 2
    report, cases = read_report(junit)
    failed = {case.name: case for case in cases if case.outcome == "failure"}
    assert "files" in failed and "config.json" in (failed["files"].message or "")
    inside = run_lmi_build("verify", str(hf_artifact), "--junit-xml", str(hf_artifact / "junit.xml"))
    assert inside.returncode == 1 and "inside the artifact" in inside.stderr
    assert not (hf_artifact / "junit.xml").exists()
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    html = MarkdownIt("commonmark").enable("table").render(summary)
    assert "<td>files</td>\n<td>passed</td>" in html and ": valid</h2>" in html


def test_an_invalid_build_summarises_what_failed_and_its_memory(tmp_path: Path) -> None:
    env = _actions_env(tmp_path)
    result = run_lmi_build("trtllm", "--model", "demo:tiny-llama", "--tp", "3", "--instance-type", "g5.12xlarge",
                           "--output", str(tmp_path / "out"), env=env)
    assert result.returncode == 2
    assert any(line.startswith("::error title=lmi-build::") for line in result.stderr.splitlines())
    html = MarkdownIt("commonmark").enable("table").render((tmp_path / "summary.md").read_text(encoding="utf-8"))
    assert "<code>demo:tiny-llama</code>: invalid plan</h2>" in html and "<h3>What failed</h3>" in html
    assert "<td>weights</td>" in html and "<td>free</td>" in html


def test_a_build_summary_has_its_row(hf_artifact: Path) -> None:
    outcome = BuildOutcome(plan=make_plan("hf"), status="cached", output=hf_artifact,
                           published={"url": "s3://bucket/models/tiny/"}, original_steps=[])
    html = MarkdownIt("commonmark").enable("table").render(build_summary(outcome, 1.25))
    assert "<td>cached</td>\n<td style=\"text-align:right\">1.2 s</td>\n<td>hit</td>\n" in html
    assert "<td><code>s3://bucket/models/tiny/</code></td>" in html
    assert re.search(r"<td style=\"text-align:right\">[0-9.]+ KiB</td>", html)  # the artifact's size, from its manifest


def test_a_properties_finding_is_annotated_on_its_line(tmp_path: Path) -> None:
    properties = tmp_path / "conf" / "serving.properties"
    properties.parent.mkdir()
    properties.write_text("option.max_rolling_batch_size=16\noption.rolling_batch=auto\n"
                          "option.max_rolling_batch_size=32\n", encoding="utf-8")
    result = run_lmi_build("plan", "hf", "--model", "demo:tiny-llama", "--properties", str(properties),
                           env=_actions_env(tmp_path))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("::warning ")]
    assert any(line.startswith("::warning title=lmi-build,file=conf/serving.properties,line=1::")
               and "set twice" in line for line in warnings), result.stderr
