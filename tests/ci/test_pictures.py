"""The pictures: the plan's memory per device as a bar (one model of its segments, drawn in the
terminal and in Markdown) and a matrix run as a timeline per host (a text Gantt chart). At 80
columns and at 40 nothing is cut: every figure of the legend and every build's name stays whole."""

from __future__ import annotations

import io
import os

import pytest
from markdown_it import MarkdownIt
from rich.console import Console, RenderableType

from lmi_build.fleet.timeline import Span, TextGantt, mermaid_gantt
from lmi_build.planning.memory_bar import MemoryBar, cells, device_memory, memory_markdown
from lmi_build.planning.plan import MemoryEstimate
from tests.cli_process import run_lmi_build

GIB = 1024**3
PAGED = MemoryEstimate(num_parameters=8_000_000_000, weight_bytes=16 * GIB, kv_bytes_per_token=131072,
                       kv_cache_bytes=8 * GIB, devices=2, per_device_bytes=10 * GIB, device_memory_bytes=22 * GIB,
                       instance_type="g5.12xlarge", fits=True, activation_bytes=GIB, kv_free_fraction=0.9,
                       kv_cache_device_bytes=int(10.8 * GIB))
WHOLE = MemoryEstimate(num_parameters=3_000_000, weight_bytes=6 * 1024**2, kv_bytes_per_token=4096,
                       kv_cache_bytes=8 * 1024**2, devices=1, per_device_bytes=262 * 1024**2)


def _render(renderable: RenderableType, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, soft_wrap=True)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_the_segments_fill_the_device() -> None:
    model = device_memory(PAGED)
    assert [segment.label for segment in model.segments] == ["weights", "activations", "runtime", "KV cache", "free"]
    assert [segment.bytes for segment in model.segments][:3] == [8 * GIB, GIB, GIB]  # weights over 2 devices
    assert sum(segment.bytes for segment in model.segments) == 22 * GIB and model.over == 0
    whole = device_memory(WHOLE)  # a KV cache allocated whole, no instance type: nothing is "free"
    assert [segment.label for segment in whole.segments] == ["weights", "KV cache, activations, runtime"]
    over = device_memory(PAGED.model_copy(update={"device_memory_bytes": 9 * GIB}))
    assert over.over > 0 and over.segments[-1].bytes == 0


@pytest.mark.parametrize("width", [10, 23, 40, 60])
def test_the_bar_takes_its_width_and_shows_every_segment(width: int) -> None:
    shares = cells(device_memory(PAGED), width)
    assert sum(count for _, count in shares) == width
    assert all(count >= 1 for _, count in shares)  # a 1 GiB runtime in a 22 GiB device is still drawn


@pytest.mark.parametrize("width", [80, 40])
def test_the_terminal_bar_cuts_no_figure(width: int) -> None:
    lines = _render(MemoryBar(device_memory(PAGED)), width)
    assert all(len(line) <= width for line in lines), lines
    text = "\n".join(lines)
    for item in ("█ weights 8.0 GiB", "▓ activations 1.0 GiB", "▒ runtime 1.0 GiB", "░ KV cache 10.8 GiB",
                 "· free 1.2 GiB"):
        assert any(item in line for line in lines), (item, text)
    assert "22.0 GiB (g5.12xlarge)" in text.replace("\n", " ")
    bar = next(line for line in lines if line.startswith("█"))
    assert len(bar) == min(60, width) and bar.count("·") >= 1


def test_the_markdown_bar_is_a_table_of_the_same_segments() -> None:
    html = MarkdownIt("commonmark").enable("table").render(memory_markdown(device_memory(PAGED), "tp2 | 8B"))
    assert "<strong>tp2 | 8B</strong>" in html  # the pipe of a name neither ends nor breaks anything
    for label, size in (("weights", "8.0 GiB"), ("KV cache", "10.8 GiB"), ("free", "1.2 GiB")):
        assert f"<td>{label}</td>\n<td style=\"text-align:right\">{size}</td>" in html
    assert html.count("<tr>") == 1 + 5  # the header and a row per segment


SPANS = [Span("host-a", "hf-tiny-llama-float16", 0.0, 30.0, "built"),
         Span("host-b", "trtllm-tiny-llama-tp2-awq-a-very-long-build-name", 5.0, 60.0, "failed"),
         Span("host-a", "hf-tiny-llama-bfloat16", 30.0, 31.0, "cached")]


@pytest.mark.parametrize("width", [80, 40])
def test_the_timeline_keeps_every_name_whole(width: int) -> None:
    lines = _render(TextGantt(SPANS), width)
    assert lines[0].startswith("Timeline per host (0 to 60.0 s")
    assert lines.index("host-a") < lines.index("host-b")
    for span in SPANS:
        assert any(f"{span.name} {span.status} {span.seconds:.1f} s" in line for line in lines), (span.name, lines)
    bars = [line for line in lines if line[:1] in "█·"]
    assert len(bars) == 3 and len({len(bar.split(" ")[0]) for bar in bars}) == 1  # one time axis
    assert bars[0].startswith("█") and bars[-1].split(" ")[0].endswith("█")  # first from 0, the last to the end
    assert all(len(line) <= width for line in lines if "long-build-name" not in line)


def test_the_mermaid_timeline_is_one_fenced_gantt() -> None:
    text = mermaid_gantt([*SPANS, Span("host:c; #x", "name: with; marks#", 1.0, 2.0, "running")])
    fences = [token for token in MarkdownIt("commonmark").parse(text) if token.type == "fence"]
    assert [fence.info for fence in fences] == ["mermaid"]
    lines = fences[0].content.splitlines()
    assert lines[:4] == ["gantt", "    title lmi-build matrix", "    dateFormat X", "    axisFormat %H:%M:%S"]
    assert "    section host c   x" in lines  # ":" ";" "#" would end the name or the statement
    assert "    name  with  marks (running, 1.0 s) :active, 1, 2" in lines
    assert "    hf-tiny-llama-bfloat16 (cached, 1.0 s) :done, 30, 31" in lines


@pytest.mark.parametrize("columns", ["80", "40"])
def test_plan_ends_its_memory_section_with_the_bar(columns: str) -> None:
    result = run_lmi_build("plan", "trtllm", "--model", "demo:tiny-llama", "--instance-type", "g5.12xlarge",
                           env={**os.environ, "COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    caption = next(index for index, line in enumerate(lines) if line.startswith("Memory of "))
    assert lines.index("Memory") < caption < lines.index("Toolchain")
    section = "\n".join(lines[caption:lines.index("Toolchain")])
    for part in ("█ weights", "▓ activations", "▒ runtime", "░ KV cache", "· free"):
        assert part in section
    assert all(len(line) <= int(columns) for line in lines[caption:lines.index("Toolchain")])


def test_the_axis_reaches_a_build_that_just_started() -> None:
    """A start the driver's clock took after the end it has for a build (its result came back first)."""
    lines = _render(TextGantt([Span("a", "x", 0.0, 5.0, "built"), Span("a", "y", 9.0, 4.0, "running")]), 80)
    assert lines[0].startswith("Timeline per host (0 to 9.0 s")
    assert lines[-1].split(" ")[0].endswith("█")  # drawn at the end of the axis, not past it
