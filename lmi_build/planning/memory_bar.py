"""The plan's memory on one device as a bar: weights, activations, runtime, KV cache and what is left
free of the device (``--instance-type``). One model of the segments (``device_memory``), drawn twice:
in the terminal after the plan's Memory section (``MemoryBar``) and in a step summary
(``memory_markdown``). Each segment has its own glyph, so the bar reads without colour too."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions
from rich.text import Text

from lmi_build.planning.plan import MemoryEstimate
from lmi_build.reporting import markdown
from lmi_build.reporting.output import human_bytes

BAR_CELLS = 60  # the widest bar; narrower screens get a narrower one


@dataclass(frozen=True)
class Segment:
    label: str
    bytes: int
    glyph: str
    style: str


@dataclass(frozen=True)
class DeviceMemory:
    """What one device holds, in the order it is taken, and the device's usable memory when known."""

    segments: tuple[Segment, ...]
    devices: int
    capacity: int | None
    instance: str | None

    @property
    def used(self) -> int:
        return sum(segment.bytes for segment in self.segments if segment.label != "free")

    @property
    def over(self) -> int:
        """Bytes beyond the device's usable memory (0 when it fits or no device is known)."""
        return max(0, self.used - self.capacity) if self.capacity else 0


def device_memory(memory: MemoryEstimate) -> DeviceMemory:
    weights = -(-memory.weight_bytes // memory.devices)
    paged = memory.kv_free_fraction is not None or memory.gpu_memory_utilization is not None
    if paged:  # the KV cache is what the runtime allocates of the rest (sized only for an instance type)
        activations = memory.activation_bytes or 0
        parts = [("weights", weights), ("activations", activations),
                 ("runtime", max(0, memory.per_device_bytes - weights - activations)),  # CUDA graphs included
                 ("KV cache", memory.kv_cache_device_bytes or 0)]
    else:  # a KV cache allocated whole at start-up: the estimate holds it with activations and runtime
        parts = [("weights", weights), ("KV cache, activations, runtime", max(0, memory.per_device_bytes - weights))]
    capacity = memory.device_memory_bytes
    used = sum(size for _, size in parts)
    if capacity:
        parts.append(("free", max(0, capacity - used)))
    segments = tuple(Segment(label, size, *_LOOK[label]) for label, size in parts if size > 0 or label == "free")
    return DeviceMemory(segments=segments, devices=memory.devices, capacity=capacity, instance=memory.instance_type)


_LOOK = {"weights": ("█", "magenta"), "activations": ("▓", "yellow"), "runtime": ("▒", "blue"),
         "KV cache": ("░", "cyan"), "KV cache, activations, runtime": ("░", "cyan"), "free": ("·", "dim")}


def cells(model: DeviceMemory, width: int) -> list[tuple[Segment, int]]:
    """Each segment's share of ``width`` cells (largest remainders; every segment that holds bytes
    gets at least one cell, so a small runtime is still seen)."""
    total = max(model.capacity or 0, model.used) or 1
    shown = [segment for segment in model.segments if segment.bytes > 0]
    exact = [segment.bytes * width / total for segment in shown]
    counts = [max(1, int(value)) for value in exact]
    order = sorted(range(len(shown)), key=lambda index: exact[index] - int(exact[index]), reverse=True)
    for index in order:
        if sum(counts) >= width:
            break
        counts[index] += 1
    while sum(counts) > width and max(counts, default=0) > 1:
        counts[counts.index(max(counts))] -= 1
    return list(zip(shown, counts, strict=True))


def _caption(model: DeviceMemory) -> str:
    where = f" of {human_bytes(model.capacity)} ({model.instance})" if model.capacity else ""
    verdict = f", {human_bytes(model.over)} over" if model.over else ""
    devices = "1 device" if model.devices == 1 else f"each of {model.devices} devices"
    return f"Memory of {devices}: {human_bytes(model.used)}{where}{verdict}"


def _legend(model: DeviceMemory) -> list[str]:
    return [f"{segment.glyph} {segment.label} {human_bytes(segment.bytes)}" for segment in model.segments]


class MemoryBar:
    """The bar in the terminal: a caption, the bar, and a legend wrapped between its items (never
    inside one), so no number is cut at any width."""

    def __init__(self, model: DeviceMemory) -> None:
        self.model = model

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        width = max(1, options.max_width)
        for part in textwrap.wrap(_caption(self.model), width, break_long_words=False, break_on_hyphens=False):
            yield Text(part, style="table.title", no_wrap=True, overflow="ignore")
        bar = Text(no_wrap=True, overflow="crop")
        for segment, count in cells(self.model, max(10, min(BAR_CELLS, width))):
            bar.append(segment.glyph * count, style=segment.style)
        yield bar
        line = ""
        for item in _legend(self.model):
            if line and len(line) + 2 + len(item) > width:
                yield Text(line, no_wrap=True, overflow="ignore")
                line = ""
            line = f"{line}  {item}" if line else item
        if line:
            yield Text(line, no_wrap=True, overflow="ignore")


def memory_markdown(model: DeviceMemory, title: str) -> str:
    """The bar in a step summary: the bar as inline code, then a table of the segments."""
    bar = "".join(segment.glyph * count for segment, count in cells(model, BAR_CELLS))
    total = max(model.capacity or 0, model.used) or 1
    rows = [[markdown.code(segment.glyph), markdown.text(segment.label), human_bytes(segment.bytes),
             f"{segment.bytes / total:.0%}"] for segment in model.segments]
    return (f"**{markdown.text(title)}**: {markdown.text(_caption(model))}\n\n{markdown.code(bar)}\n\n"
            + markdown.table(["", "memory", "size", "share"], rows, right=(2, 3)))
