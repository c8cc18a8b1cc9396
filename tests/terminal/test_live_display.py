"""A live display (progress bar) at a terminal and the library quieting of ``Output`` together.

No process or pty: the console writes to a stream that says it is a terminal, which is all rich
looks at before it puts its FileProxy on sys.stdout/sys.stderr.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmi_build.reporting import output
from lmi_build.reporting.output import Mode, Output


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Terminal]:
    """The screen; the test puts it on sys.stderr itself (pytest's capture puts its own stream
    there between a fixture's setup and the test's call)."""
    screen = _Terminal()
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    out = Output(mode=Mode.HUMAN)
    monkeypatch.setattr(output, "_current", out)
    yield screen
    output.reset()


@pytest.mark.parametrize("debug", [True, False])
def test_library_chatter_under_a_progress_bar_at_a_terminal(terminal: _Terminal, debug: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: ``--debug`` at a terminal ended in a RecursionError (741 KB of tracebacks) when a
    library printed under a progress bar: the library's console wrote into the bar's proxy, which
    printed through a console whose stream was the library sink again."""
    monkeypatch.setattr(sys, "stderr", terminal)
    output.set_debugging(debug)
    out = output.current()
    with out.progress() as progress:
        assert progress is not None
        task = progress.add_task("writing the checkpoint", total=10)
        with out.library_output():
            print("current rank: 0, tp rank: 0, pp rank: 0")
            print("a library's stderr line", file=sys.stderr)
            progress.update(task, completed=10)
    screen = terminal.getvalue()
    assert len(screen) < 8000, screen[-2000:]
    assert "Recursion" not in screen
    assert ("debug: current rank: 0, tp rank: 0, pp rank: 0" in screen) is debug
    assert ("debug: a library's stderr line" in screen) is debug
    assert "writing the checkpoint" in screen and "debug: writing" not in screen
    assert sys.stderr is terminal  # the display and the block gave sys.stderr back


def _bar_console(out: Output) -> io.StringIO:
    from rich.console import Console

    stream = io.StringIO()
    out._err = Console(file=stream, width=120, force_terminal=False)
    return stream


def test_a_bar_stopped_by_ctrl_c_reads_what_was_written(tmp_path: Path) -> None:
    """Issue 42: after Ctrl-C the trtllm checkpoint bar read 100%: the streamed writer preallocates
    its rank files, so their sizes read complete before a byte is written."""
    out = Output(mode=Mode.HUMAN)
    stream = _bar_console(out)
    with pytest.raises(KeyboardInterrupt), out.watch_written("writing", tmp_path, total=6_000_000):
        with (tmp_path / "rank0.safetensors").open("wb") as rank:
            rank.truncate(6_000_000)  # as the streamed writer does
            rank.write(b"x" * 1_000_000)
        raise KeyboardInterrupt
    assert "1.0/6.0 MB" in stream.getvalue() and "6.0/6.0" not in stream.getvalue(), stream.getvalue()

    counted = _bar_console(out)
    with pytest.raises(KeyboardInterrupt), out.counting_bytes("writing", total=6_000_000) as bar:
        bar.add(1_000_000)
        raise KeyboardInterrupt
    assert "1.0/6.0 MB" in counted.getvalue() and "6.0/6.0" not in counted.getvalue(), counted.getvalue()

    finished = _bar_console(out)
    with out.counting_bytes("writing", total=6_000_000) as bar:
        bar.stage("reading the layout")
        for _ in range(5):
            bar.add(1_000_000)
    assert "5.0/5.0 MB" in finished.getvalue(), finished.getvalue()  # what was written, not the estimate
