"""Container profiles: one ``profiles/<name>.toml`` per LMI TensorRT-LLM container.

Read without heavy imports (``plan`` and ``--help`` call this). Profiles are validated against
``ContainerProfile`` when loaded; a malformed file is a clear error naming the file.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from lmi_build.errors import LmiBuildError, UnknownName, UnsupportedTarget
from lmi_build.tables import read_table
from lmi_build.targets.trtllm.profile_schema import ContainerProfile
from lmi_build.versions import parse_lmi_version, parse_version

PROFILES_ENV = "LMI_BUILD_PROFILES_DIR"


class ProfileError(LmiBuildError):
    """A profile file is unreadable or does not match the profile schema."""

    code = "profile"


def profiles_dir() -> Path:
    """``$LMI_BUILD_PROFILES_DIR``, else the bundled copy in a wheel, else the repository's ``profiles/``."""
    explicit = os.environ.get(PROFILES_ENV)
    if explicit:
        return Path(explicit).expanduser()
    package_root = Path(__file__).resolve().parents[2]
    bundled = package_root / "_bundled" / "profiles"
    if bundled.is_dir():
        return bundled
    return package_root.parent / "profiles"


def load_profile_file(path: Path) -> ContainerProfile:
    profile = read_table(path, ContainerProfile, error=ProfileError,
                         hint="fix the file; lmi_build/targets/trtllm/profile_schema.py has the fields")
    if profile.name != path.stem:
        raise ProfileError(f"profile {path.name} is named '{profile.name}'",
                           hint=f"set name = \"{path.stem}\" (the file name without .toml)")
    return profile


@lru_cache(maxsize=4)
def _load_from(directory: str) -> tuple[ContainerProfile, ...]:
    root = Path(directory)
    if not root.is_dir():
        raise ProfileError(f"no container profiles directory at {root}",
                           hint=f"reinstall lmi-build or set {PROFILES_ENV}")
    profiles = [load_profile_file(path) for path in sorted(root.glob("*.toml"))]
    # Release order: a release candidate sorts before its release (0.21.0rc1 < 0.21.0), so the
    # default profile (the newest) is the final release once both are installed.
    profiles.sort(key=lambda p: (parse_version(p.tensorrt_llm), parse_lmi_version(p.lmi_version), p.name))
    return tuple(profiles)


def load_profiles() -> list[ContainerProfile]:
    """Every profile, oldest TensorRT-LLM first."""
    return list(_load_from(str(profiles_dir())))


def get_profile(name: str | None) -> ContainerProfile:
    """The named profile; ``None`` -> the newest released engine-capable one."""
    profiles = load_profiles()
    if name is None:
        capable = [p for p in profiles if p.engine_capable and p.released]
        if not capable:
            raise UnsupportedTarget("no engine-capable container profile is installed",
                                    hint=f"add a profile under {profiles_dir()}")
        return capable[-1]
    for profile in profiles:
        if profile.name == name:
            return profile
    known = ", ".join(p.name for p in profiles) or "none"
    raise UnknownName(f"unknown container profile '{name}'", hint=f"known profiles: {known}")
