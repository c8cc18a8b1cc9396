"""A matrix run as a timeline of builds per worker host: when each build started and ended on which
host. Drawn as a text Gantt chart under the matrix table (``TextGantt``) and as a mermaid ``gantt``
block in a GitHub step summary (``mermaid_gantt``), both from the same spans."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions
from rich.text import Text

from lmi_build.reporting import markdown
from lmi_build.reporting.output import printable

GANTT_CELLS = 40  # the widest text bar; a narrower screen gets a narrower one
STATUS_STYLE = {"cached": "cyan", "built": "green", "script": "green", "stand_in": "yellow", "checkpoint": "yellow",
                "failed": "red", "running": "blue"}


@dataclass(frozen=True)
class Span:
    """One build on one host, in seconds since the matrix started."""

    lane: str
    name: str
    start: float
    end: float
    status: str

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


def lanes(spans: Sequence[Span]) -> dict[str, list[Span]]:
    """The spans by host, hosts in the order their first build started, builds by start."""
    by_lane: dict[str, list[Span]] = {}
    for span in sorted(spans, key=lambda span: (span.start, span.name)):
        by_lane.setdefault(span.lane or "(no host)", []).append(span)
    return by_lane


class TextGantt:
    """A bar per build (``█`` while it ran) on one time axis, grouped by host. A build's name and
    numbers stand after its bar, or on a line of their own above it when they do not fit beside
    it: nothing is cut at any width."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = list(spans)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        if not self.spans:
            return
        width = max(1, options.max_width)
        cells = max(10, min(GANTT_CELLS, width // 2))
        total = max(max(span.end, span.start) for span in self.spans) or 1.0
        title = f"Timeline per host (0 to {total:.1f} s, one cell {total / cells:.2g} s)"
        for part in textwrap.wrap(title, width, break_long_words=False, break_on_hyphens=False):
            yield Text(part, style="table.title", no_wrap=True, overflow="ignore")
        for lane, spans in lanes(self.spans).items():
            yield Text(printable(lane), style="bold", no_wrap=True, overflow="ignore")
            for span in spans:
                first = min(cells - 1, int(span.start / total * cells))
                last = max(first + 1, min(cells, round(span.end / total * cells)))
                bar = Text("·" * first, style="dim")
                bar.append("█" * (last - first), style=STATUS_STYLE.get(span.status, ""))
                bar.append("·" * (cells - last), style="dim")
                label = f"{printable(span.name)} {span.status} {span.seconds:.1f} s"
                if cells + 1 + len(label) > width:
                    yield Text(label, no_wrap=True, overflow="ignore")
                    yield bar
                else:
                    bar.append(" " + label)
                    yield bar


_MERMAID_TAG = {"cached": "done", "built": "done", "script": "done", "failed": "crit", "running": "active"}
_MERMAID_UNSAFE = re.compile(r"[:;#\n\r`]")


def _mermaid_text(value: str) -> str:
    """A task or section name mermaid reads as text: ``:`` ends a task's name, ``;`` and ``#`` a
    statement or an entity."""
    return _MERMAID_UNSAFE.sub(" ", printable(value)).strip() or "-"


def mermaid_gantt(spans: Sequence[Span], title: str = "lmi-build matrix") -> str:
    """The timeline as a mermaid ``gantt`` block (GitHub renders it in a step summary): a section per
    host, a task per build, times as seconds since the start (``dateFormat X``)."""
    lines = ["gantt", f"    title {_mermaid_text(title)}", "    dateFormat X", "    axisFormat %H:%M:%S"]
    for lane, listed in lanes(spans).items():
        lines.append(f"    section {_mermaid_text(lane)}")
        for span in listed:
            start = int(span.start)
            end = max(start + 1, round(span.end))
            tag = _MERMAID_TAG.get(span.status)
            what = f"{_mermaid_text(span.name)} ({span.status}, {span.seconds:.1f} s)"
            lines.append(f"    {what} :{tag + ', ' if tag else ''}{start}, {end}")
    return markdown.fenced("mermaid", "\n".join(lines))
