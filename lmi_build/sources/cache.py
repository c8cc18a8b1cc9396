"""Where lmi-build keeps what it generates or downloads: ``$LMI_BUILD_CACHE``, default
``~/.cache/lmi-build``. Read at call time (not import time) so tests and CI can redirect it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("LMI_BUILD_CACHE")
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "lmi-build"
    root.mkdir(parents=True, exist_ok=True)
    return root
