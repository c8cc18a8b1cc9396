"""Versions of installed packages, read from their metadata: nothing is imported (no torch on
the planning path)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Distribution name -> version for those of ``names`` that are installed."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
