"""Relative paths that come from somewhere else (a manifest, an S3 listing, a tarball) must stay
inside the directory they are written to."""

from __future__ import annotations

from pathlib import Path

from lmi_build.artifact.files import escaping_path
from lmi_build.core.errors import LmiBuildError


def safe_relpath(rel: str, *, error: type[LmiBuildError], where: str) -> str:
    """Return ``rel`` if it is a plain relative POSIX path; raise ``error`` otherwise."""
    if escaping_path(rel) is not None:
        raise error(
            f"refusing path {rel!r} from {where}: it would escape the destination directory",
            hint="the source is malformed or malicious; fix or republish it",
        )
    return rel


def inside(root: Path, rel: str) -> Path:
    """``root / rel`` after checking the result does not leave ``root`` (defence in depth)."""
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"{rel!r} escapes {root}")
    return root / rel
