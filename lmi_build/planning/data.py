"""Loading of the planner's bundled data tables (``lmi_build/data/*.toml``)."""

from __future__ import annotations

import sys
from functools import cache
from importlib.resources import files
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@cache
def load_table(name: str) -> dict[str, Any]:
    """Parse ``lmi_build/data/<name>`` once per process."""
    text = (files("lmi_build") / "data" / name).read_text(encoding="utf-8")
    return tomllib.loads(text)
