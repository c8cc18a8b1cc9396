"""Where an artifact may be written: checked before any work, so ``--overwrite`` can never delete
what the user keeps.

``--overwrite`` replaces the output directory as a whole. Replacing ``--output ''`` (the current
directory), ``--output ./model`` (the model being built) or the model's parent would delete the
very data the build reads, so an output that is, or contains, a protected place is refused, and so
is an output inside the model source or the cache (writing there changes them). Outputs that
cannot be created (a parent is a file, no write permission, a mount point to be replaced) are
refused here too, as one line, instead of failing with a traceback after the work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lmi_build.core.errors import LmiBuildError

# Protected places that an output must not even sit inside (writing there changes them).
NOT_INSIDE = frozenset({"the model source", "the cache", "the checkpoint", "the engine directory"})


class OutputPlaceError(LmiBuildError):
    code = "output_place"


def protected_places(*, model_dir: Path | None, cache: Path, extra: Mapping[str, Path | None] | None = None) -> dict[str, Path]:
    """The places a build's output must never replace: the current directory, the home directory,
    the cache, the model source (when local) and the extra inputs given (checkpoint, engines)."""
    places: dict[str, Path] = {"the current directory": Path.cwd(), "the home directory": Path.home(),
                               "the cache": cache}
    if model_dir is not None:
        places["the model source"] = model_dir
    places.update({label: path for label, path in (extra or {}).items() if path is not None})
    return places


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path.expanduser().absolute()))


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path("/")


def check_output_place(output: Path, *, overwrite: bool, protected: Mapping[str, Path]) -> None:
    """Refuse an output that would replace or sit inside a protected place, or that cannot be
    created or replaced. ``output`` as the user gave it (an empty string means the current directory)."""
    if str(output).strip() in ("", "."):
        raise OutputPlaceError("--output is the current directory; lmi-build replaces its output as a whole",
                               hint="pass a new directory, e.g. --output ./artifact")
    real_output = _real(output)
    if real_output == Path("/"):
        raise OutputPlaceError("--output is the filesystem root", hint="pass a new directory, e.g. --output ./artifact")
    for label, place in protected.items():
        real_place = _real(place)
        if real_output == real_place or real_output in real_place.parents:
            what = "is" if real_output == real_place else "contains"
            raise OutputPlaceError(f"--output {output} {what} {label} ({place}); refusing to replace it",
                                   hint="pass a new directory for the artifact")
        if label in NOT_INSIDE and real_place in real_output.parents:
            raise OutputPlaceError(f"--output {output} is inside {label} ({place})",
                                   hint="pass a directory outside it for the artifact")
    existing = _first_existing(output.absolute())
    if existing != output.absolute() and not existing.is_dir():
        raise OutputPlaceError(f"cannot create --output {output}: {existing} is not a directory",
                               hint="choose an --output whose parent is a directory")
    parent = existing if existing != output.absolute() else output.absolute().parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPlaceError(f"cannot write --output {output}: {parent} is not writable",
                               hint="choose a directory you can write, or fix its permissions")
    if overwrite and output.is_dir() and not output.is_symlink() and os.path.ismount(output):
        raise OutputPlaceError(f"--output {output} is a mount point and cannot be replaced",
                               hint=f"pass a new directory inside it, e.g. --output {output}/artifact")
