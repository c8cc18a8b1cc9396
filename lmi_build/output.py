"""One output object for every command: human tables, ``--json`` for CI, ``--quiet`` for pipelines.

Results go to stdout; progress, warnings, hints and errors go to stderr, so ``--json`` output can
always be piped into ``jq``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


class Mode(str, Enum):
    HUMAN = "human"
    JSON = "json"
    QUIET = "quiet"


@dataclass
class Output:
    mode: Mode = Mode.HUMAN
    _out: Console | None = field(default=None, repr=False)
    _err: Console | None = field(default=None, repr=False)

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            # No file= : rich then resolves sys.stdout at write time (pytest capture, redirections).
            self._out = Console(soft_wrap=True)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, soft_wrap=True)
        return self._err

    @property
    def human(self) -> bool:
        return self.mode is Mode.HUMAN

    def result(self, data: Any, render: Any = None) -> None:
        """Print a command's result: ``data`` as JSON in json mode, ``render`` (a rich renderable
        or string) in human mode, nothing in quiet mode."""
        if self.mode is Mode.JSON:
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
            sys.stdout.flush()
        elif self.mode is Mode.HUMAN and render is not None:
            self.out.print(render)

    def info(self, message: str) -> None:
        if self.mode is Mode.HUMAN:
            self.err.print(message, highlight=False)

    def warn(self, message: str) -> None:
        if self.mode is not Mode.QUIET:
            self.err.print(f"[yellow]warning:[/yellow] {message}", highlight=False)

    def error(self, message: str) -> None:
        # Errors are printed in every mode: a pipeline must see why it failed.
        self.err.print(f"[red]error:[/red] {message}", highlight=False, markup=True)

    def log_line(self, prefix: str, line: str) -> None:
        """One streamed line of a vendor tool's output (shown live unless quiet/json)."""
        if self.mode is Mode.HUMAN:
            from rich.text import Text

            # Text, not markup: vendor lines such as "[TensorRT-LLM][INFO] ..." must print verbatim.
            text = Text(f"{prefix} ", style="dim")
            text.append(line)
            self.err.print(text, highlight=False)

    @contextmanager
    def progress(self, unit: str = "bytes") -> Iterator[Progress | None]:
        """A rich progress display in human mode; ``None`` otherwise (callers must accept it).
        ``unit="bytes"`` shows sizes and speed (transfers); anything else counts items
        ("batches", "files") as ``done/total unit``."""
        if self.mode is not Mode.HUMAN:
            yield None
            return
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        columns: list[ProgressColumn | str] = [TextColumn("{task.description}"), BarColumn()]
        if unit == "bytes":
            columns += [DownloadColumn(), TransferSpeedColumn()]
        else:
            columns += [MofNCompleteColumn(), TextColumn(unit)]
        with Progress(*columns, TimeRemainingColumn(), console=self.err, transient=False) as progress:
            yield progress


_current = Output()


def current() -> Output:
    return _current


def set_mode(mode: Mode) -> Output:
    global _current
    _current = Output(mode=mode)
    return _current
