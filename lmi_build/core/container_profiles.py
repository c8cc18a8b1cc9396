"""Container profiles: one TOML file per container release, in its target's package
(``lmi_build/targets/<target>/data/profiles/<name>.toml``), read into the target's own model; and
what ``lmi-build profiles list|show`` shows of one.

A new release is one new file, no code: its ``name`` is the file name without ``.toml`` and its facts
carry their sources. ``$LMI_BUILD_PROFILES_DIR/<target>/``, where it exists, replaces that target's
packaged profiles (a release tried without reinstalling, a test's own set).
"""

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import model_validator

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.tables import read_table
from lmi_build.core.types import Record
from lmi_build.core.versions import LmiVersionText, parse_lmi_version

PROFILES_ENV = "LMI_BUILD_PROFILES_DIR"
DLC_URI = re.compile(r"\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/djl-inference:[\w.-]+")


class ContainerRelease(Record):
    """The fields every target's profile starts with."""

    name: str  # the file name without .toml: what --profile takes
    lmi_version: LmiVersionText  # DJL Serving / LMI release, e.g. "0.27.0"
    # The published AWS Deep Learning Container (an ECR URI) of this release, and where it is listed
    # (image list file and line); None when only DJL's own build of the image exists. Each target's
    # default profile is its newest published one.
    dlc: str | None = None
    dlc_source: str | None = None

    @model_validator(mode="after")
    def _dlc_cited(self) -> "ContainerRelease":
        if (self.dlc is None) != (self.dlc_source is None):
            raise ValueError("dlc and dlc_source go together: the published image and the image list naming it")
        if self.dlc is not None and not DLC_URI.fullmatch(self.dlc):
            raise ValueError(f"dlc {self.dlc!r} is not an ECR djl-inference URI (ACCOUNT.dkr.ecr.REGION.amazonaws.com/"
                             "djl-inference:TAG)")
        return self

    @property
    def published(self) -> bool:
        """Whether the image is a published DLC (else only DJL's own build exists)."""
        return self.dlc is not None


Profile = TypeVar("Profile", bound=ContainerRelease)


class ProfileError(LmiBuildError):
    """A profile file is unreadable or does not match its target's profile model."""

    code = "profile"


@dataclass(frozen=True)
class ProfileRow:
    """One profile as ``profiles list`` shows it: its columns and its ``--json`` fields."""

    name: str
    default: bool  # what its target builds for without --profile
    compiler: str
    runtime: str
    layout: str
    workflow: str  # how its container loads or builds an artifact
    data: dict[str, Any]


@dataclass(frozen=True)
class ProfileView:
    """``profiles show NAME``: its ``--json`` object, and its text (plain, no markup): the heading
    beside its name, then its lines."""

    data: dict[str, Any]
    heading: str
    lines: list[str]


def published_line(profile: ContainerRelease, image: str | None) -> str:
    """``profiles show``'s line on the image: the published DLC with the lists naming it, or DJL's own build."""
    if profile.dlc is not None:
        return f"  published: DLC {profile.dlc} (listed in {profile.dlc_source})"
    if image:
        return f"  published: no DLC; DJL's own build only ({image})"
    return "  published: no image (source only)"


def profiles_dir(target: str, packaged: Path) -> Path:
    """``$LMI_BUILD_PROFILES_DIR/<target>`` when that directory exists, else ``packaged``."""
    override = os.environ.get(PROFILES_ENV)
    if override:
        replaced = Path(override).expanduser() / target
        if replaced.is_dir():
            return replaced
    return packaged


def read_profile(path: Path, model: type[Profile]) -> Profile:
    """One profile file, validated as ``model``; its ``name`` must be its file name."""
    profile = read_table(path, model, error=ProfileError,
                         hint=f"fix the file; {model.__name__} in {model.__module__} has the fields")
    if profile.name != path.stem:
        raise ProfileError(f"profile {path.name} is named '{profile.name}'",
                           hint=f"set name = \"{path.stem}\" (the file name without .toml)")
    return profile


@cache
def _read_dir(directory: Path, model: type[ContainerRelease]) -> tuple[ContainerRelease, ...]:
    if not directory.is_dir():
        raise ProfileError(f"no container profiles directory at {directory}",
                           hint=f"reinstall lmi-build, or give {PROFILES_ENV} a <target>/ directory")
    profiles = [read_profile(path, model) for path in sorted(directory.glob("*.toml"))]
    return tuple(sorted(profiles, key=lambda profile: parse_lmi_version(profile.lmi_version)))


def load_profiles(target: str, packaged: Path, model: type[Profile]) -> list[Profile]:
    """Every profile of ``target`` (its packaged ``data/profiles/``, or the override), oldest LMI
    release first; each directory is read once per process."""
    return cast("list[Profile]", list(_read_dir(profiles_dir(target, packaged), model)))  # read as ``model``
