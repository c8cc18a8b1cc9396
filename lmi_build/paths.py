"""Where lmi-build keeps its caches (demo models, local digests, built artifacts)."""

from __future__ import annotations

import os
from pathlib import Path


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
