"""One output object for every command: human tables, ``--json`` for CI, ``--quiet`` for pipelines.

Results go to stdout; progress, warnings, hints and errors go to stderr, so ``--json`` output can
always be piped into ``jq``. What libraries running in this process print (ModelOpt, transformers,
torch warnings) goes to the debug channel, shown only with ``--debug`` / ``LMI_BUILD_DEBUG=1``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO, cast

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from lmi_build.errors import with_hint
from lmi_build.redaction import environment_secrets, redact_text, redact_tree

# Width of tables written to a pipe or a file when $COLUMNS does not say one: wide enough that most
# rows stay on one line. $COLUMNS, when set, is honoured in a pipe too (COLUMNS=80 lmi-build ... | less).
PIPED_WIDTH = 200
REDRAWS_PER_SECOND = 4  # live displays (progress bars, spinners) at a terminal


def piped_width() -> int:
    """The width for output that is not a terminal: $COLUMNS when it is a positive number, else PIPED_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and 0 < int(columns) <= 10_000 else PIPED_WIDTH


def _debug_from_env() -> bool:
    return os.environ.get("LMI_BUILD_DEBUG", "") not in ("", "0", "false")


class Mode(str, Enum):
    HUMAN = "human"
    JSON = "json"
    QUIET = "quiet"


@dataclass
class Output:
    mode: Mode = Mode.HUMAN
    _out: Console | None = field(default=None, repr=False)
    _err: Console | None = field(default=None, repr=False)
    _capturing: bool = field(default=False, repr=False)  # inside library_output()

    @property
    def out(self) -> Console:
        if self._out is None:

            # The stream resolves sys.stdout at write time (pytest capture, redirections).
            console = Console(file=_redacting("stdout"), soft_wrap=True)
            if not console.is_terminal:
                console.width = piped_width()
            self._out = console
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:

            self._err = Console(file=_redacting("stderr"), soft_wrap=True)
        return self._err

    @property
    def human(self) -> bool:
        return self.mode is Mode.HUMAN

    def result(self, data: Any, render: Any = None) -> None:
        """Print a command's result: ``data`` as JSON in json mode, ``render`` (a rich renderable
        or string) in human mode, nothing in quiet mode."""
        if self.mode is Mode.JSON:
            sys.stdout.write(json.dumps(redact_tree(data, _secrets()), indent=2, sort_keys=False, default=str) + "\n")
            sys.stdout.flush()
        elif self.mode is Mode.HUMAN and render is not None:
            self.out.print(render)

    # Messages are plain text, never rich markup: they hold option keys, paths and manifest entries
    # the user or a downloaded artifact chose, and "[/x]" in one used to crash the CLI.
    def info(self, message: str) -> None:
        if self.mode is Mode.HUMAN:
            self.err.print(_plain("", "", message), highlight=False)

    def warn(self, message: str) -> None:
        if self.mode is not Mode.QUIET:
            self.err.print(_plain("warning:", "yellow", message), highlight=False)

    def error(self, message: str) -> None:
        # Errors are printed in every mode: a pipeline must see why it failed.
        self.err.print(_plain("error:", "red", message), highlight=False)

    def failure(self, code: str, message: str, hint: str | None, details: tuple[str, ...] = ()) -> None:
        """The command failed: one line on stderr in every mode and, with ``--json``,
        ``{"error": {code, message, hint}}`` on stdout, so a pipeline reading stdout sees it too.
        ``details`` (several problems) follow that line one per line, and are the error's
        ``details`` list in JSON."""

        if self.mode is Mode.JSON:
            error: dict[str, Any] = {"code": code, "message": message, "hint": hint}
            if details:
                error["details"] = list(details)
            sys.stdout.write(json.dumps(redact_tree({"error": error}, _secrets()), indent=2) + "\n")
            sys.stdout.flush()
        line = Text("error:", style="red")
        line.append(" " + printable(with_hint(message, hint)))  # plain text: it may hold "[...]"
        self.err.print(line, highlight=False)
        for detail in details:
            self.err.print(Text("  " + printable(detail)), highlight=False)

    def debug(self, message: str) -> None:
        """A line for the debug log (library chatter, internals): shown only with --debug."""
        if debugging():

            self.err.print(Text(f"debug: {message}", style="dim"), highlight=False)

    def log_line(self, prefix: str, line: str) -> None:
        """One streamed line of a vendor tool's output (shown live unless quiet/json)."""
        if self.mode is Mode.HUMAN:

            # Text, not markup: vendor lines such as "[TensorRT-LLM][INFO] ..." must print verbatim.
            text = Text(f"{prefix} ", style="dim")
            text.append(line)
            self.err.print(text, highlight=False)

    @contextmanager
    def library_output(self) -> Iterator[None]:
        """Run in-process libraries (ModelOpt, transformers, torch) quietly: what they print on
        stdout/stderr, log, or warn goes to the debug channel, line by line. This object's own
        messages and progress bars still reach the real stderr."""
        real_err = sys.stderr
        console = self.err
        sink = _DebugLines()
        handler = _DebugLogHandler()
        # Loggers with their own handlers (transformers' library logger, the root logger) would
        # write to the stderr they captured when created; route them here for the duration.
        loggers = [logging.getLogger(), *(logger for logger in logging.root.manager.loggerDict.values()
                                          if isinstance(logger, logging.Logger) and logger.handlers)]
        saved = [(logger, logger.handlers[:]) for logger in loggers]

        self._err = Console(file=_redacting("stderr", real_err), soft_wrap=True)
        self._capturing = True
        try:
            for logger in loggers:
                logger.handlers = [handler]
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
                warnings.showwarning = _warning_to_debug
                yield
        finally:
            sink.flush_partial()
            for logger, handlers in saved:
                logger.handlers = handlers
            self._err = console
            self._capturing = False

    @contextmanager
    def working(self, label: str) -> Iterator[Callable[[str], None]]:
        """While a vendor tool runs: a spinner line under its streamed output with the time it
        has taken and its last line (trtllm-build or neuronx-cc can print nothing for minutes).
        The returned function takes each new line; nothing is shown in --quiet/--json, nor when
        stderr is not a terminal (a CI log gets the lines alone, not a redrawn status line)."""
        if self.mode is not Mode.HUMAN or not self.err.is_terminal:
            yield lambda _line: None
            return

        with Progress(SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"), console=self.err,
                      transient=True, refresh_per_second=REDRAWS_PER_SECOND, redirect_stdout=False,
                      redirect_stderr=False) as progress:
            task = progress.add_task(label, total=None)

            def last_line(line: str) -> None:
                shown = line if len(line) <= 60 else line[:59] + "…"
                progress.update(task, description=f"{label}; last: {shown}")

            yield last_line

    @contextmanager
    def watch_written(self, label: str, directory: Any, *, total: int | None = None) -> Iterator[None]:
        """While the block runs (a library writing a checkpoint we cannot instrument), show the bytes
        written under ``directory`` so far, polled twice a second; nothing in --quiet/--json."""
        with self.progress() as progress:
            if progress is None:
                yield
                return
            task = progress.add_task(label, total=total)
            done = threading.Event()

            def written() -> int:
                size = 0
                for path in Path(directory).rglob("*"):
                    with contextlib.suppress(OSError):
                        if path.is_file():
                            size += path.stat().st_size
                return size

            def show(size: int, *, final: bool = False) -> None:
                # ``total`` is the plan's estimate: a bar never reads "7.1/6.3 MB" (the total grows
                # with what was written), and the finished one reads what was really written.
                shown_total = size if final or total is None or size > total else total
                progress.update(task, completed=size, total=shown_total if total is not None or final else None)

            def poll() -> None:
                while not done.wait(0.5):
                    show(written())

            watcher = threading.Thread(target=poll, name="lmi-build-progress", daemon=True)
            watcher.start()
            try:
                yield
            finally:
                done.set()
                watcher.join()
                show(written(), final=True)

    @contextmanager
    def native_output_to_debug(self) -> Iterator[None]:
        """File descriptors 1 and 2 point at temporary files for the block, so what native code and
        child processes write there (Ray's C++ core, its workers) is kept out of the console and
        replayed as debug lines afterwards. Python's sys.stdout/sys.stderr keep the real terminal."""
        sys.stdout.flush()
        sys.stderr.flush()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        captured = {fd: tempfile.TemporaryFile() for fd in (1, 2)}  # noqa: SIM115 (closed in finally)
        old_out, old_err = sys.stdout, sys.stderr
        sys.stdout = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
        sys.stderr = os.fdopen(os.dup(saved[2]), "w", buffering=1, encoding="utf-8", errors="replace")
        for fd, sink in captured.items():
            os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            for fd, original in saved.items():
                os.dup2(original, fd)
                os.close(original)
            replaced = (sys.stdout, sys.stderr)
            sys.stdout, sys.stderr = old_out, old_err
            for stream in replaced:
                stream.close()
            for sink in captured.values():
                sink.seek(0)
                for raw in sink.read().decode("utf-8", "replace").splitlines():
                    if raw.strip():
                        self.debug(raw)
                sink.close()

    @contextmanager
    def progress(self, unit: str = "bytes") -> Iterator[Progress | None]:
        """A rich progress display in human mode; ``None`` otherwise (callers must accept it).
        ``unit="bytes"`` shows sizes and speed (transfers); anything else counts items
        ("batches", "files") as ``done/total unit``."""
        if self.mode is not Mode.HUMAN:
            yield None
            return

        columns: list[ProgressColumn | str] = [TextColumn("{task.description}"), BarColumn()]
        if unit == "bytes":
            columns += [DownloadColumn(), TransferSpeedColumn()]
        else:
            columns += [MofNCompleteColumn(), TextColumn(unit)]
        # Inside library_output() stdout/stderr already go to the debug channel: a live display must
        # not take them back.
        # Four redraws a second: at 80 columns a bar line with its colours is ~1 KB, and rich's
        # default of ten a second wrote ~10 KB a second to the terminal for as long as a step ran.
        with Progress(*columns, TimeRemainingColumn(), console=self.err, transient=False,
                      refresh_per_second=REDRAWS_PER_SECOND,
                      redirect_stdout=not self._capturing, redirect_stderr=not self._capturing) as progress:
            yield progress


_SECRETS: list[str] | None = None


def _secrets() -> list[str]:
    """The environment's credential values, read once per command line (``reset()`` forgets them)."""
    global _SECRETS
    if _SECRETS is None:
        _SECRETS = environment_secrets()
    return _SECRETS


class _Redacting(io.TextIOBase):
    """The console's stream: every write passes ``redaction.redact_text`` first, so no path that
    prints (a table, a message, a vendor log line, a traceback under --debug) can show a credential.
    ``fixed`` pins the stream; otherwise sys.stdout/sys.stderr are looked up at each write."""

    def __init__(self, name: str, fixed: TextIO | None = None) -> None:
        self._name = name
        self._fixed = fixed

    def _target(self) -> TextIO:
        if self._fixed is not None:
            return self._fixed
        stream: TextIO = getattr(sys, self._name)
        # A live rich display (progress bar) at a terminal replaces sys.stdout/sys.stderr with a
        # FileProxy that prints through the console; the console writing to that proxy wrote into
        # itself, without end (issue 30: every progress bar hung at a terminal). Write past it.
        # (rich.file_proxy.FileProxy, recognised by its attribute: importing rich here would load
        # it at every start-up, --help and --version included.)
        while (proxied := getattr(stream, "rich_proxied_file", None)) is not None:
            stream = cast(TextIO, proxied)
        return stream

    def write(self, text: str) -> int:
        self._target().write(redact_text(text, _secrets()))
        return len(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self._target().fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target(), "encoding", None) or "utf-8"


def _redacting(name: str, fixed: TextIO | None = None) -> TextIO:
    return cast(TextIO, _Redacting(name, fixed))


class _DebugLines(io.TextIOBase):
    """A text stream that sends every line written to it to the debug channel. Progress bars
    (tqdm's carriage returns) count as line ends, so each update is one debug line."""

    def __init__(self) -> None:
        super().__init__()
        self._partial = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False  # libraries then print plain lines, not terminal animations

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).replace("\r", "\n").split("\n")
        for line in lines:
            if line.strip():
                current().debug(line.rstrip())
        return len(text)

    def flush_partial(self) -> None:
        if self._partial.strip():
            current().debug(self._partial.rstrip())
        self._partial = ""


class _DebugLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        current().debug(f"{record.name}: {record.getMessage()}")


def _warning_to_debug(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: TextIO | None = None, line: str | None = None) -> None:
    current().debug(f"{category.__name__}: {message} ({filename}:{lineno})")


def identifier(value: str, style: str = "") -> Text:
    """A table cell that must never be cut (profile name, image URI, option key). In a column with
    ``no_wrap=True`` it stays on one line while the table can narrow other columns; past that it
    folds onto more lines. (A plain ``no_wrap`` cell would be cropped there, silently.)"""

    # Lines lmi-build joins into one cell stay lines; every other steering character is escaped.
    return Text("\n".join(printable(line) for line in value.split("\n")), style=style, no_wrap=False,
                overflow="fold")


# Characters that steer a terminal instead of printing: C0 and C1 controls (ESC starts a colour or a
# cursor move, CR and LF a forged line such as "error: ..."), DEL, the Unicode line and paragraph
# separators and the bidirectional overrides that reorder what a line seems to say.
_STEERING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` (a message, name or cell that holds user text: a matrix build's name, a path, a model id)
    as the terminal must show it: each steering character written as its escape (``\\x1b``, ``\\n``), so
    user text can neither forge a line nor recolour or erase one (issue 42 item 9)."""
    return _STEERING.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def human_count(count: int) -> str:
    """A parameter (or token) count as people read it: ``3.1 M``, ``6.74 B``, ``512``; never
    ``0.00 B`` for a small model."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            value = count / scale
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return str(count)


def human_bytes(size: int) -> str:
    """A size in binary units, one decimal (``12.6 GiB``, ``6.0 MiB``, ``512 B``)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_current = Output()
_debug = _debug_from_env()


def current() -> Output:
    return _current


def set_mode(mode: Mode) -> Output:
    global _current
    _current = Output(mode=mode)
    return _current


def debugging() -> bool:
    """Whether the debug channel and tracebacks are shown (--debug or LMI_BUILD_DEBUG=1)."""
    return _debug


def set_debugging(enabled: bool) -> None:
    global _debug
    _debug = enabled


def reset() -> Output:
    """Human mode, debug and the secrets to redact as the environment says: the state every command
    line starts from."""
    global _SECRETS
    _SECRETS = None
    set_debugging(_debug_from_env())
    return set_mode(Mode.HUMAN)


def _plain(label: str, style: str, message: str) -> Text:

    line = Text(label, style=style)
    line.append(printable(f" {message}" if label else message))
    return line
