"""GitHub Actions: errors and warnings as workflow commands (annotations), and the step summary.

Under ``GITHUB_ACTIONS=true`` each error and warning lmi-build prints is also printed as
``::error title=...,file=...,line=...::message`` (GitHub's "workflow commands", escaped as
actions/toolkit's ``packages/core/src/command.ts`` does: ``%``, CR and LF in the message; those and
``:`` and ``,`` in a property). They go to stderr with the rest of the messages: the runner reads
workflow commands on both streams (inferred from its handlers, which feed both to the command
manager), and stdout stays the ``--json`` document.

A finding is placed on a file when its message names one the command read: ``serving.properties:7``
(the properties reader's ``name:line``) or ``build[2]`` of a matrix file (the line of its 3rd
``[[build]]`` table). ``note_source`` records those files; nothing else changes under Actions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lmi_build.core.errors import bounded
from lmi_build.core.redaction import command_secrets, environment_secrets, redact_text

Kind = Literal["error", "warning", "notice"]
# The largest step summary GitHub shows is 1 MiB (its documented limit); lmi-build's own stay far below.
MAX_SUMMARY_BYTES = 1024 * 1024


def in_actions() -> bool:
    """Whether this process runs in a GitHub Actions job (the runner sets ``GITHUB_ACTIONS=true``)."""
    return os.environ.get("GITHUB_ACTIONS", "") == "true"


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


@dataclass(frozen=True)
class Location:
    """Where a finding comes from: a file (as the workspace names it) and, when known, a line."""

    file: str
    line: int | None = None


def workflow_command(kind: Kind, message: str, *, title: str | None = None, location: Location | None = None) -> str:
    """One ``::kind props::message`` line (one line whatever ``message`` holds), redacted and bounded."""
    props: list[tuple[str, str]] = []
    if title:
        props.append(("title", title))
    if location is not None:
        props.append(("file", location.file))
        if location.line is not None:
            props.append(("line", str(location.line)))
    shown = ",".join(f"{name}={escape_property(_clean(value))}" for name, value in props)
    return f"::{kind}{' ' + shown if shown else ''}::{escape_data(_clean(bounded(message)))}"


def _clean(text: str) -> str:
    return redact_text(text, command_secrets())


@dataclass
class _Source:
    path: Path
    anchors: dict[str, int] = field(default_factory=dict)  # "build[2]" -> the line of its table


_SOURCES: dict[str, _Source] = {}  # by file name (what a message says: "serving.properties:7")
_BUILD_TABLE = re.compile(r"^\s*\[\[\s*build\s*\]\]")
_NAME_LINE = re.compile(r"(?<![\w.-])([\w.-]+):(\d+)\b")
_BUILD_LABEL = re.compile(r"^(build\[\d+\])")


def note_source(path: Path, text: str | None = None) -> None:
    """Remember a file this command reads findings from; a matrix file's ``text`` gives each
    ``[[build]]`` table's line."""
    anchors: dict[str, int] = {}
    if text is not None:
        tables = (number for number, line in enumerate(text.splitlines(), 1) if _BUILD_TABLE.match(line))
        anchors = {f"build[{index}]": number for index, number in enumerate(tables)}
    _SOURCES[path.name] = _Source(path, anchors)


def forget_sources() -> None:
    _SOURCES.clear()


def locate(message: str) -> Location | None:
    """The file (and line) a message names, among those ``note_source`` recorded."""
    for found in _NAME_LINE.finditer(message):
        source = _SOURCES.get(found.group(1))
        if source is not None:
            return Location(workspace_path(source.path), int(found.group(2)))
    label = _BUILD_LABEL.match(message)
    for source in _SOURCES.values():
        if label is not None and label.group(1) in source.anchors:
            return Location(workspace_path(source.path), source.anchors[label.group(1)])
    for name, source in _SOURCES.items():
        if str(source.path) in message or name in message:
            return Location(workspace_path(source.path))
    return None


def workspace_path(path: Path) -> str:
    """``path`` as an annotation names it: relative to the checkout (``GITHUB_WORKSPACE``, else the
    current directory) when it lies inside it, else as given."""
    resolved = path.resolve()
    for base in (os.environ.get("GITHUB_WORKSPACE"), os.getcwd()):
        if base and resolved.is_relative_to(Path(base).resolve()):
            return resolved.relative_to(Path(base).resolve()).as_posix()
    return path.as_posix()


def summary_file() -> Path | None:
    """The step summary to append to (``GITHUB_STEP_SUMMARY``), or None."""
    value = os.environ.get("GITHUB_STEP_SUMMARY", "")
    return Path(value) if value else None


def append_summary(markdown: str) -> bool:
    """Append ``markdown`` (redacted, bounded) to the step summary; False when there is none. A
    summary that cannot be written is not the command's failure (OSError is left to the caller)."""
    target = summary_file()
    if target is None:
        return False
    text = redact_text(markdown, environment_secrets())  # once per summary: read afresh
    data = text.encode("utf-8")
    if len(data) > MAX_SUMMARY_BYTES:
        data = data[:MAX_SUMMARY_BYTES - 64].decode("utf-8", "ignore").encode("utf-8") + b"\n\n(summary shortened)\n"
    with target.open("ab") as stream:
        stream.write(data if data.endswith(b"\n") else data + b"\n")
    return True
