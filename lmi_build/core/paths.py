"""Where lmi-build keeps its caches (demo models, local digests, built artifacts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """``$LMI_BUILD_CACHE``, else ``$XDG_CACHE_HOME/lmi-build``, else ``~/.cache/lmi-build``.

    Read at call time (never at import) so tests and callers can point it elsewhere.
    """
    explicit = os.environ.get("LMI_BUILD_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "lmi-build"


def name_text(name: str) -> str:
    """A file name as text to write into a file or show: under a locale whose encoding is not UTF-8
    (``LC_ALL=C`` without Python's UTF-8 mode) Python keeps a name's non-ASCII bytes as lone
    surrogates, which no UTF-8 file can hold (issue 42: a Cyrillic model directory failed the
    artifact's own verification, "a lone UTF-16 surrogate" in lmi-build.json). The name's bytes are
    read as UTF-8, as the terminal shows them; bytes that are not UTF-8 become U+FFFD. Text that
    holds no such escapes is returned as it is."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def text_tree(value: Any) -> Any:
    """A JSON-like tree with every string through ``name_text`` (what lmi-build writes to a file)."""
    if isinstance(value, str):
        return name_text(value)
    if isinstance(value, dict):
        return {name_text(str(key)): text_tree(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [text_tree(item) for item in value]
    return value


def path_text(text: str) -> str:
    """The inverse of ``name_text`` for a path read back from a file: the string that names the same
    bytes on this host's file system (unchanged under a UTF-8 locale)."""
    return os.fsdecode(text.encode("utf-8", "surrogateescape"))
