"""GitHub Actions: workflow commands escaped as actions/toolkit does, placed on the file and line a
finding names, printed only under GITHUB_ACTIONS=true and never with a secret; the step summary
appended to, redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmi_build.reporting import github
from lmi_build.reporting.output import Mode, reset, set_mode

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture(autouse=True)
def _fresh_sources() -> None:
    github.forget_sources()


def test_workflow_commands_escape_as_the_toolkit_does() -> None:
    # actions/toolkit packages/core/src/command.ts: escapeData (%, CR, LF) and escapeProperty (also : and ,)
    assert github.escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert github.escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    line = github.workflow_command("error", "bad\nline", title="lmi-build: x, y",
                                   location=github.Location("dir/builds.toml", 7))
    assert line == "::error title=lmi-build%3A x%2C y,file=dir/builds.toml,line=7::bad%0Aline"
    assert github.workflow_command("warning", "plain") == "::warning::plain"


def test_a_finding_is_placed_on_the_file_and_line_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    properties = tmp_path / "conf" / "serving.properties"
    matrix = tmp_path / "builds.toml"
    github.note_source(properties)
    github.note_source(matrix, "[defaults]\nmodel = 'x'\n\n[[build]]\ntarget = 'hf'\n\n  [[ build ]]\ntp = 2\n")
    assert github.locate("option.tp is set twice: serving.properties:3 and serving.properties:9") == \
        github.Location("conf/serving.properties", 3)
    assert github.locate("build[1] (tp=2): tp 2 does not divide 3 heads") == github.Location("builds.toml", 7)
    assert github.locate("build[0]: target is missing") == github.Location("builds.toml", 4)
    assert github.locate("builds.toml: 2 error(s), nothing was built") == github.Location("builds.toml")
    assert github.locate("other.properties:3 is not noted") is None
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "conf"))
    assert github.locate("serving.properties:3") == github.Location("serving.properties", 3)


def test_messages_become_annotations_only_under_actions(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = reset()
    out.warn("plain warning")
    out.error("plain error")
    assert "::" not in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("HF_TOKEN", SECRET)
    out = reset()
    out.warn(f"token {SECRET} was refused")
    out.failure("invalid_matrix", "m.toml: 1 error(s)", "fix it", ("build[0]: bad",))
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout stays the --json document
    lines = captured.err.splitlines()
    assert "::warning title=lmi-build::token *** was refused" in lines
    assert "::error title=lmi-build%3A invalid_matrix::m.toml: 1 error(s) (fix it)" in lines
    assert "::error title=lmi-build%3A invalid_matrix::build[0]: bad" in lines
    assert SECRET not in captured.err
    set_mode(Mode.QUIET).warn("quiet mode shows no warning")
    assert capsys.readouterr().err == ""


def test_the_step_summary_is_appended_to_and_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert github.append_summary("# nothing") is False  # no GITHUB_STEP_SUMMARY: nothing written
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    assert github.append_summary("## failed with wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    text = summary.read_text()
    assert text.startswith("earlier step\n## failed with ") and "wJalrXUtnFEMI" not in text
