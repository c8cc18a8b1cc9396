"""The Markdown of a step summary (GitHub-flavoured: tables, fenced blocks). Text from the user or a
build (names, errors, URLs) is escaped so that it reads as written: it can neither end a table
cell, nor become a link, an HTML tag or emphasis."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lmi_build.core.errors import bounded

# ASCII punctuation that CommonMark or GFM would read as markup, each escaped with a backslash.
_MARKUP = re.compile(r"([\\`*_\[\]<>#~|&!])")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
CELL_CHARS = 500  # a table cell: an error's one line, an s3:// URL


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", bounded(text, CELL_CHARS))


def text(value: str) -> str:
    """``value`` as plain text in a paragraph or a cell."""
    return _MARKUP.sub(r"\\\1", _one_line(value))


def code(value: str) -> str:
    """``value`` as inline code (a URL, a path, a build's name: copied whole, never a link)."""
    shown = _one_line(value).replace("|", "\\|")  # a pipe inside a cell's code span still ends the cell
    fence = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}" if shown else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """A GFM table of cells already escaped (``text``/``code``); ``right``: columns aligned right."""
    rule = ["---:" if index in right else "---" for index in range(len(header))]
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join(rule)} |"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines) + "\n"


def fenced(info: str, body: str) -> str:
    """A fenced block (``mermaid``, ``text``) of ``body``, its fence longer than any inside it."""
    fence = "`" * max(3, max((len(run) for run in re.findall("`{3,}", body)), default=0) + 1)
    return f"{fence}{info}\n{body.rstrip()}\n{fence}\n"
