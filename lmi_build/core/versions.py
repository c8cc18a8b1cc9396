"""Versions: of installed packages (read from their metadata: nothing is imported, no torch on the
planning path), and parsed and compared as PEP 440 versions with ``packaging``.

Two comparisons exist, and each caller says which one it means:

- ordering (``parse_version``): ``0.21.0rc1 < 0.21.0 < 0.21.1``; a pre-release precedes its release.
- release number (``release``): ``0.21.0rc1`` -> ``(0, 21, 0)``, for range checks such as "since
  0.12" or "the flag series of 0.21": a release candidate already has its release's tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Annotated

from packaging.version import Version
from pydantic import AfterValidator

# DJL Serving tags its nightly images "<next release>-nightly", which is not PEP 440.
_NIGHTLY_TAG = "-nightly"


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Distribution name -> version for those of ``names`` that are installed."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def parse_version(text: str) -> Version:
    """``text`` as a PEP 440 version, for ordering; ``packaging.version.InvalidVersion`` (a
    ``ValueError``) when it is not one."""
    return Version(text)


def release(text: str) -> tuple[int, ...]:
    """The release number of a version, without pre-, post-, dev- or local parts:
    ``"0.21.0rc1"`` -> ``(0, 21, 0)``. Compare it with tuples: ``release(v) >= (0, 12)``."""
    return Version(text).release


def parse_lmi_version(text: str) -> Version:
    """An LMI (DJL Serving) version: PEP 440, or a nightly tag ``"0.36.0-nightly"``, which orders
    as the development release ``0.36.0.dev0``: after 0.35.x, before 0.36.0 itself."""
    if text.endswith(_NIGHTLY_TAG):
        return Version(f"{text.removesuffix(_NIGHTLY_TAG)}.dev0")
    return Version(text)


def _checked_lmi_version(text: str) -> str:
    parse_lmi_version(text)  # profiles are ordered by it: an unparsable one is refused when loaded
    return text


# A profile field holding an LMI version, checked when the profile is read (every target's profiles).
LmiVersionText = Annotated[str, AfterValidator(_checked_lmi_version)]
