"""File-system helpers every layer shares: atomic file writes.

A reader (a serving container, a concurrent lmi-build, a crash-resumed run) must never see half a
file, so every file lmi-build owns is written to a temporary file in the same directory and
renamed over the target, after an optional check of what was written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write_text(path: Path, text: str, *, encoding: str = "utf-8",
                      check: Callable[[Path], None] | None = None) -> Path:
    """Write ``text`` to ``path`` atomically. ``check`` may inspect the temporary file (and raise)
    before it replaces ``path``; on any failure ``path`` is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "w", encoding=encoding, newline="\n") as stream:
            stream.write(text)
        # mkstemp creates 0600 files; the result must be readable like any file the user writes.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        if check is not None:
            check(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path
