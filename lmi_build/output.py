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

            self._out = Console(file=sys.stdout, soft_wrap=True)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(file=sys.stderr, soft_wrap=True)
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
            self.err.print(f"[dim]{prefix}[/dim] {line}", highlight=False, markup=True)

    @contextmanager
    def progress(self) -> Iterator[Progress | None]:
        """A rich progress display in human mode; ``None`` otherwise (callers must accept it)."""
        if self.mode is not Mode.HUMAN:
            yield None
            return
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.err,
            transient=False,
        ) as progress:
            yield progress


_current = Output()


def current() -> Output:
    return _current


def set_mode(mode: Mode) -> Output:
    global _current
    _current = Output(mode=mode)
    return _current
