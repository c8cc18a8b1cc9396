"""Build events (``lmi_build.reporting.events``): bounded, redacted, throttled, never failing the work; the
matrix live view's step and time left, drawn from a state given by hand (no clock)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from lmi_build.core.errors import MESSAGE_CHARS
from lmi_build.core.redaction import forget_command_secrets
from lmi_build.fleet.job import Job, Started
from lmi_build.fleet.report import MatrixProgress
from lmi_build.reporting import events
from tests.cli_process import run_lmi_build

SCHEMA = json.loads(events.SCHEMA_PATH.read_text(encoding="utf-8"))


def _valid(event: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft202012Validator(SCHEMA).validate(event)
    return event


def test_the_schema_is_a_schema_and_refuses_what_is_not_an_event() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    _valid(events.make("step_end", step="convert", status="ok", seconds=1.5))
    for wrong in (events.make("step_end", step="convert", status="ok"),  # no seconds
                  events.make("bytes", what="upload", done=-1, final=False),
                  events.make("step_start", step="convert", unknown=1),
                  {**events.make("warning", message="m"), "schema": 2}):
        with pytest.raises(jsonschema.ValidationError):
            _valid(wrong)


def test_events_are_bounded_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123")
    forget_command_secrets()
    got: list[dict[str, Any]] = []
    with events.listening(got.append):
        events.emit("warning", message="token hf_abcdefghijklmnopqrstuvwxyz0123 " + "x" * 50_000)
        events.emit("error", code="c", message="m", details=[f"d{i}" for i in range(10_000)])
    forget_command_secrets()
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in json.dumps(got)
    assert len(got[0]["message"]) <= MESSAGE_CHARS and len(got[1]["details"]) == events.MAX_EVENT_ITEMS
    for event in got:
        _valid(event)


def test_byte_events_are_throttled_capped_and_end_with_the_final_count(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "BYTES_EVERY_S", 0.0)  # the cap alone
    with events.listening(got.append):
        counted = events.ByteEvents("upload", 10_000)
        for _ in range(10_000):
            counted.add(1)
        counted.finish()
    assert len(got) == events.MAX_BYTE_EVENTS
    assert got[-1]["final"] is True and got[-1]["done"] == 10_000
    monkeypatch.setattr(events, "BYTES_EVERY_S", 3600.0)  # one in an hour: the first, then the final
    got.clear()
    with events.listening(got.append):
        counted = events.ByteEvents("download", None)
        for _ in range(100):
            counted.add(1)
        counted.finish(complete=False)
    assert [(event["done"], event["final"]) for event in got] == [(1, False), (100, True)]
    assert "total" not in got[-1] and got[-1]["complete"] is False


def test_a_step_says_how_it_ended() -> None:
    got: list[dict[str, Any]] = []
    with events.listening(got.append), pytest.raises(ValueError), events.step("convert", estimate_s=3.0):
        raise ValueError("boom")
    assert [(e["type"], e.get("estimate_s"), e.get("status")) for e in got] == [
        ("step_start", 3.0, None), ("step_end", None, "failed")]


def test_an_events_file_that_cannot_be_written_warns_once_and_stops(capsys: pytest.CaptureFixture[str]) -> None:
    events.open_sink("/dev/full")
    try:
        for _ in range(3):
            events.emit("warning", message="m")
    finally:
        events.close_sink(exit_code=0, outcome="ok")
    assert capsys.readouterr().err.count("events could not be written") == 1


def test_the_events_option_of_a_build_and_its_errors(tmp_path: Path, _session_cache: Path) -> None:
    """A build's --events file holds its plan, each step's start and end, and its result; a path that
    cannot be written is a usage error before any work; ``-`` is stderr."""
    path = tmp_path / "events.jsonl"
    done = run_lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "out"), "--no-cache",
                         "--json", "--events", str(path))
    assert done.returncode == 0, done.stderr
    written = [_valid(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    kinds = [(event["type"], event.get("step")) for event in written]
    assert kinds[0] == ("plan", None) and kinds[-1] == ("result", None)
    assert {("step_start", "fetch"), ("step_end", "fetch"), ("step_start", "package"), ("step_end", "package")} <= set(kinds)
    assert written[-1]["exit_code"] == 0 and written[-1]["data"]["status"] == "artifact"

    full = run_lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "full"), "--no-cache",
                         "--events", "/dev/full")
    assert full.returncode == 0 and full.stderr.count("events could not be written") == 1, full.stderr
    assert (tmp_path / "full" / "lmi-build.json").is_file()  # a build that succeeded stays a success

    refused = run_lmi_build("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "no"),
                            "--events", str(tmp_path / "missing" / "e.jsonl"))
    assert refused.returncode == 1 and "cannot write" in refused.stderr and not (tmp_path / "no").exists()
    assert "Traceback" not in refused.stderr

    failed = run_lmi_build("verify", str(tmp_path / "nothing-here"), "--events", "-")
    lines = [json.loads(line) for line in failed.stderr.splitlines() if line.startswith("{")]
    assert [event["type"] for event in lines][-2:] == ["error", "result"], failed.stderr
    assert lines[-1]["exit_code"] == failed.returncode != 0


def _job(name: str) -> Job:
    return Job(name=name, target="hf", cache_key="sha256:" + "0" * 64, saved_plan="{}")


def _text(progress: MatrixProgress, now: float) -> str:
    console = Console(width=100, file=io.StringIO(), color_system=None)
    console.print(progress.render(now=now))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_the_live_view_shows_each_running_builds_step_and_time_left() -> None:
    progress = MatrixProgress([_job("estimated"), _job("unestimated"), _job("queued")])
    for name in ("estimated", "unestimated"):
        progress.started(Started(name=name, host="host-a"), now=1000.0)
    progress.event("estimated", events.make("step_start", step="quantize", estimate_s=200.0), now=1010.0)
    progress.event("unestimated", events.make("step_start", step="engine"), now=1010.0)
    lines = {line.split()[0]: line for line in _text(progress, now=1040.0).splitlines()[1:] if line.strip()}
    assert lines["estimated"].split()[-3:] == ["quantize", "~2m", "50s"]
    assert lines["unestimated"].split()[-2:] == ["engine", "?"]
    assert "queued" not in lines
    assert _text(progress, now=1500.0).count("overdue") == 1  # past its estimate: never negative time
    progress.event("estimated", events.make("step_end", step="quantize", status="ok", seconds=1.0))
    assert "quantize" not in _text(progress, now=1500.0)


def test_the_events_document_lists_every_type_and_field_of_the_schema() -> None:
    document = (Path(__file__).resolve().parents[1] / "docs" / "EVENTS.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line for line in document.splitlines() if line.startswith("| `")}
    for branch in SCHEMA["allOf"]:
        kind = branch["if"]["properties"]["type"]["const"]
        assert kind in rows, kind
        missing = [field for field in branch["then"]["properties"] if f"`{field}`" not in rows[kind]]
        assert not missing, (kind, missing)
