"""One output object for every command: human tables, ``--json`` for CI, ``--quiet`` for pipelines.

Results go to stdout; progress, warnings, hints and errors go to stderr, so ``--json`` output can
always be piped into ``jq``. What libraries running in this process print (ModelOpt, transformers,
torch warnings) goes to the debug channel, shown only with ``--debug`` / ``LMI_BUILD_DEBUG=1``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO, cast

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
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
from rich.table import Table
from rich.text import Text

from lmi_build.core.errors import MESSAGE_CHARS, bounded, with_hint
from lmi_build.core.redaction import command_secrets, forget_command_secrets, redact_text, redact_tree
from lmi_build.reporting import events, github

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
    # What Ctrl-C (or SIGTERM) leaves behind, said by a command whose answer differs from a build's
    # ("the vendor tool was stopped and work directories removed"): a publish, a pull.
    interrupted_hint: str | None = None

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
        or string) in human mode, nothing in quiet mode. ``data`` is also the ``result`` event's (``--events``)."""
        events.keep_result(data)
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
        events.emit("warning", message=message)
        if self.mode is not Mode.QUIET:
            self.err.print(_plain("warning:", "yellow", message), highlight=False)
            annotate("warning", message)

    def error(self, message: str) -> None:
        # Errors are printed in every mode: a pipeline must see why it failed.
        self.err.print(_plain("error:", "red", message), highlight=False)
        annotate("error", message)

    def failure(self, code: str, message: str, hint: str | None, details: tuple[str, ...] = ()) -> None:
        """The command failed: one line on stderr in every mode and, with ``--json``,
        ``{"error": {code, message, hint}}`` on stdout, so a pipeline reading stdout sees it too.
        ``details`` (several problems) follow that line one per line, and are the error's
        ``details`` list in JSON. Each is bounded, and so is the number of details."""
        message, hint = bounded(message), None if hint is None else bounded(hint)
        details = _bounded_details(details)
        events.emit("error", code=code, message=message, hint=hint, details=list(details) or None)

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
        annotate("error", with_hint(message, hint), title=f"lmi-build: {code}")
        for detail in details:
            annotate("error", detail, title=f"lmi-build: {code}")

    def traceback(self, error: BaseException) -> None:
        """``error``'s traceback on stderr (--debug, or a bug), redacted as every other line is."""
        stream = _redacting("stderr")
        stream.write("".join(traceback.format_exception(error)))
        stream.flush()

    def debug(self, message: str) -> None:
        """A line for the debug log (library chatter, internals): shown only with --debug."""
        if debugging():
            self.err.print(Text(f"debug: {bounded(message, 4 * MESSAGE_CHARS)}", style="dim"), highlight=False)

    def log_line(self, prefix: str, line: str) -> None:
        """One streamed line of a vendor tool's output (shown live unless quiet/json)."""
        if self.mode is Mode.HUMAN:

            # Text, not markup: vendor lines such as "[TensorRT-LLM][INFO] ..." must print verbatim.
            text = Text(f"{prefix} ", style="dim")
            text.append(bounded(line, 4 * MESSAGE_CHARS))  # the log file keeps the whole line
            self.err.print(text, highlight=False)

    @contextmanager
    def library_output(self) -> Iterator[None]:
        """Run in-process libraries (ModelOpt, transformers, torch) quietly: what they print on
        stdout/stderr, log, or warn goes to the debug channel, line by line. This object's own
        messages and progress bars still reach the real stderr."""
        console = self.err
        saved_file = console.file
        sink = _DebugLines()
        handler = _DebugLogHandler()
        # Loggers with their own handlers (transformers' library logger, the root logger) would
        # write to the stderr they captured when created; route them here for the duration.
        loggers = [logging.getLogger(), *(logger for logger in logging.root.manager.loggerDict.values()
                                          if isinstance(logger, logging.Logger) and logger.handlers)]
        saved = [(logger, logger.handlers[:]) for logger in loggers]

        # The console keeps writing to the real stderr while sys.stderr is the sink below. It stays
        # the same console object, so a live display drawing through it (a progress bar started
        # before this block) still places these lines above itself. (Issue 42: a new console on the
        # stderr of that moment wrote into the display's FileProxy, which printed through the old
        # console, whose stream was now the sink, which printed through the new console: --debug
        # ended in a RecursionError and 741 KB of tracebacks.)
        if isinstance(saved_file, _Redacting):
            console.file = cast(TextIO, saved_file.pinned())
        capturing = self._capturing
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
            console.file = saved_file
            self._capturing = capturing

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
        written under ``directory`` so far, polled twice a second; nothing in --quiet/--json. The
        same counts go out as ``bytes`` events (``--events``, a matrix's live view)."""
        with self.progress() as progress:
            if progress is None and not events.listened():
                yield
                return
            task = progress.add_task(label, total=total) if progress is not None else None
            counted = events.ByteEvents(label, total)
            done = threading.Event()

            def written() -> int:
                size = 0
                for path in Path(directory).rglob("*"):
                    with contextlib.suppress(OSError):
                        if path.is_file():
                            size += _bytes_written(path.stat())
                return size

            def show(size: int, *, final: bool = False) -> None:
                # ``total`` is the plan's estimate: a bar never reads "7.1/6.3 MB" (the total grows
                # with what was written), and the finished one reads what was really written.
                shown_total = size if final or total is None or size > total else total
                counted.set(size)
                if progress is not None and task is not None:
                    progress.update(task, completed=size, total=shown_total if total is not None or final else None)

            def poll() -> None:
                while not done.wait(0.5):
                    show(written())

            watcher = threading.Thread(target=poll, name="lmi-build-progress", daemon=True)
            watcher.start()
            try:
                yield
            except BaseException:
                done.set()
                watcher.join()
                show(written())  # stopped (Ctrl-C, a failure): the bar keeps what was written, never "done"
                counted.finish(complete=False)
                raise
            done.set()
            watcher.join()
            show(written(), final=True)
            counted.finish()

    @contextmanager
    def counting_bytes(self, label: str, *, total: int | None) -> Iterator[ByteCount]:
        """A bar that a writer advances itself, piece by piece (``ByteCount.add``), for a writer that
        preallocates its files (their sizes say nothing of what was written). ``total`` is the plan's
        estimate; the finished bar reads what was written, a stopped one (Ctrl-C) what was written
        until then. Nothing is shown in --quiet/--json."""
        with self.progress() as progress:
            count = ByteCount(label, total, progress)
            try:
                yield count
            except BaseException:
                count.events.finish(complete=False)
                raise
            count.finish()

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
        # Guarded as the console script's streams are: a closed pipe must not fail the block's work.
        real = [os.fdopen(os.dup(saved[fd]), "w", buffering=1, encoding="utf-8", errors="replace") for fd in (1, 2)]
        sys.stdout, sys.stderr = cast(TextIO, _Guarded(real[0])), cast(TextIO, _Guarded(real[1]))
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
            sys.stdout, sys.stderr = old_out, old_err
            for opened in real:
                with contextlib.suppress(OSError):
                    opened.close()
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


def _bytes_written(status: os.stat_result) -> int:
    """A file's bytes written so far: its size, or what is allocated to it when less (a file
    truncated to its final size before its data is written is sparse until then)."""
    allocated = getattr(status, "st_blocks", None)
    return status.st_size if allocated is None else min(status.st_size, allocated * 512)


class ByteCount:
    """One bar of ``Output.counting_bytes``: ``add`` the bytes of each piece as it is written;
    ``stage`` names what the step does before its first byte (it is shown beside the label)."""

    def __init__(self, label: str, total: int | None, progress: Progress | None) -> None:
        self._label = label
        self._total = total
        self._progress = progress
        self._task = progress.add_task(label, total=total) if progress is not None else None
        self.written = 0
        self.events = events.ByteEvents(label, total)

    def stage(self, doing: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=f"{self._label} ({doing})" if doing else self._label)

    def add(self, size: int) -> None:
        self.written += size
        self.events.set(self.written)
        if self._progress is not None and self._task is not None:
            # The total is an estimate: a bar never reads "7.1/6.3 MB".
            total = None if self._total is None else max(self._total, self.written)
            self._progress.update(self._task, completed=self.written, total=total)

    def finish(self) -> None:
        self.events.finish()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=self._label, completed=self.written, total=self.written)


def _secrets() -> list[str]:
    """The environment's credential values, read once per command line (``reset()`` forgets them)."""
    return command_secrets()


class _Redacting(io.TextIOBase):
    """The console's stream: every write passes ``redaction.redact_text`` first, so no path that
    prints (a table, a message, a vendor log line, a traceback under --debug) can show a credential.
    ``fixed`` pins the stream; otherwise sys.stdout/sys.stderr are looked up at each write."""

    def __init__(self, name: str, fixed: TextIO | None = None) -> None:
        self._name = name
        self._fixed = fixed

    def _target(self) -> TextIO:
        stream: TextIO = self._fixed if self._fixed is not None else getattr(sys, self._name)
        # A live rich display (progress bar) at a terminal replaces sys.stdout/sys.stderr with a
        # FileProxy that prints through the console; the console writing to that proxy wrote into
        # itself, without end (issue 30: every progress bar hung at a terminal). Write past it.
        # (rich.file_proxy.FileProxy, recognised by its attribute: importing rich here would load
        # it at every start-up, --help and --version included.)
        while (proxied := getattr(stream, "rich_proxied_file", None)) is not None:
            stream = cast(TextIO, proxied)
        return stream

    def pinned(self) -> _Redacting:
        """This stream fixed to what it writes to now (past any live display's proxy)."""
        return _Redacting(self._name, self._target())

    def write(self, text: str) -> int:
        shown = redact_text(text, _secrets())
        target = self._target()
        try:
            target.write(shown)
        except UnicodeEncodeError:
            # A stream that cannot encode every character (a latin-1 or ASCII locale, a CJK path) gets
            # escapes for those, not a traceback (issue 42: a UnicodeEncodeError traceback).
            target.write(_encodable(shown, getattr(target, "encoding", None) or "utf-8",
                                    getattr(target, "errors", None) or "strict"))
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


def _encodable(text: str, encoding: str, errors: str = "strict") -> str:
    """``text`` with each character ``encoding`` cannot write as its ``\\u`` escape (with the stream's
    own ``errors``: under ``surrogateescape`` a name's undecodable bytes are written back as bytes)."""
    pieces = []
    for char in text:
        try:
            char.encode(encoding, errors)
            pieces.append(char)
        except UnicodeEncodeError:
            pieces.append(char.encode(encoding, "backslashreplace").decode(encoding))
    return "".join(pieces)


def _redacting(name: str, fixed: TextIO | None = None) -> TextIO:
    return cast(TextIO, _Redacting(name, fixed))


class _Guarded(io.TextIOBase):
    """sys.stdout or sys.stderr once ``guard_standard_streams`` ran: a write or flush that fails (a
    reader that closed the pipe, /dev/full, a closed descriptor) is recorded and every later one
    discarded, never raised. Reporting a result must not turn a finished build, publish or pull into
    a failure, nor make its OSError handlers clean up what it finished (issue 42 item 9)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self.failure: OSError | None = None

    def _fail(self, error: Exception) -> None:
        self.failure = error if isinstance(error, OSError) else OSError(errno.EBADF, str(error))
        # The descriptor now points at /dev/null: what the stream still buffers, and the flush at
        # interpreter exit, drain there quietly (else "Exception ignored in ..." and exit 120).
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                self._write(text)
            except (OSError, ValueError) as error:
                self._fail(error)
        return len(text)

    def _write(self, text: str) -> None:
        """A character the stream's encoding cannot write is its ``\\u`` escape (a latin-1 stdout and a
        CJK path), not a failure of the stream."""
        try:
            self._stream.write(text)
        except UnicodeEncodeError:
            self._stream.write(_encodable(text, self.encoding, self.errors or "strict"))

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._stream.flush()
            except (OSError, ValueError) as error:
                self._fail(error)

    def isatty(self) -> bool:
        try:
            return self.failure is None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)


def _open_standard_descriptors() -> None:
    """A descriptor 0, 1 or 2 that is closed (``>&-``) gets /dev/null: else the first file this
    process opens takes that number, and a print or a child process's output lands in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)


def guard_standard_streams() -> None:
    """Make stdout and stderr safe to report to, for the process's whole life (the console script
    calls this first): a closed descriptor writes to /dev/null, and a stream that cannot be written
    (a closed pipe, a full disk) stops taking output without raising. The command's own result then
    decides the exit status; ``stream_failures`` says what could not be written."""
    _open_standard_descriptors()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if isinstance(stream, _Guarded):
            continue
        if stream is None:  # Python found the descriptor closed at start-up; it is /dev/null now
            stream = open(fd, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        setattr(sys, name, _Guarded(stream))


def stream_failures() -> dict[str, OSError]:
    """The guarded standard streams that stopped taking output, with the error that stopped them."""
    found = {name: getattr(sys, name) for name in ("stdout", "stderr")}
    return {name: stream.failure for name, stream in found.items()
            if isinstance(stream, _Guarded) and stream.failure is not None}


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


# The narrowest text column a listing puts beside its identifiers; narrower, each row is stacked.
LISTING_TEXT_MIN = 16


class ListingTable(Table):
    """The narrow form of a list command (``recipes list``, ``profiles list`` at 80 columns): its
    ``no_wrap`` columns hold identifiers (one a line), the last column words. The identifier columns
    are as wide as their longest line while LISTING_TEXT_MIN columns of words fit beside them; past
    that every row is stacked (its identifiers, then its words indented), so no identifier that fits
    a line is ever cut (issue 42: ``COLUMNS=30 lmi-build recipes list`` cut "aquila" after "aquil")."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        identifiers = [column for column in self.columns if column.no_wrap]
        widths = [max((cell_len(line) for cell in column.cells for line in str(cell).splitlines()), default=0)
                  for column in identifiers]
        gaps = (self.padding[1] + self.padding[3]) * len(self.columns)
        if self.title:  # wrapped at the width like a cell (the console's soft wrap would let it run past)
            title = Table.grid()
            title.add_column(overflow="fold")
            title.add_row(self.title)
            yield title
        if sum(widths) + gaps + LISTING_TEXT_MIN > options.max_width:
            yield self._stacked()
            return
        for column, width in zip(identifiers, widths, strict=True):
            column.min_width = max(column.min_width or 0, width)
        kept, self.title = self.title, None
        try:
            yield from super().__rich_console__(console, options)
        finally:
            self.title = kept

    def _stacked(self) -> Table:
        stacked = Table.grid()
        stacked.add_column(overflow="fold")  # a table wraps each cell to the width, as the wide form does
        stacked.add_row(Text(" / ".join(str(column.header) for column in self.columns), style="bold"))
        cells = [list(column.cells) for column in self.columns]
        for row in range(self.row_count):
            first, *rest = (column[row] for column in cells)
            stacked.add_row(first)
            for cell in rest:
                stacked.add_row(Padding(cell, (0, 0, 0, 2)))
        return stacked


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
    forget_command_secrets()
    github.forget_sources()
    set_debugging(_debug_from_env())
    return set_mode(Mode.HUMAN)


def annotate(kind: github.Kind, message: str, *, title: str = "lmi-build") -> None:
    """Under GitHub Actions, ``message`` also as a workflow command (an annotation of the run, on the
    file and line it names when lmi-build read that file: ``github.locate``); nothing elsewhere."""
    if not github.in_actions():
        return
    shown = printable(bounded(message))
    stream = _redacting("stderr")
    stream.write(github.workflow_command(kind, shown, title=title, location=github.locate(shown)) + "\n")
    stream.flush()


def _plain(label: str, style: str, message: str) -> Text:
    line = Text(label, style=style)
    text = printable(bounded(message))  # every message line is bounded and printable here (info, warn, error)
    line.append(f" {text}" if label else text)
    return line


# The most detail lines one failure prints: a matrix of thousands of failed builds says how many more.
MAX_DETAILS = 50


def _bounded_details(details: tuple[str, ...]) -> tuple[str, ...]:
    shown = tuple(bounded(detail) for detail in details[:MAX_DETAILS])
    more = len(details) - MAX_DETAILS
    return (*shown, f"… and {more:,} more") if more > 0 else shown
