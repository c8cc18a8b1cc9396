"""Container profiles: one ``profiles/<name>.toml`` per LMI TensorRT-LLM container.

Read without heavy imports (``plan`` and ``--help`` call this). Profiles are validated against
``ContainerProfile`` when loaded; a malformed file is a clear error naming the file.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from lmi_build.errors import LmiBuildError, UnknownName, UnsupportedTarget
from lmi_build.targets.trtllm.profile_schema import ContainerProfile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

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


def version_key(version: str) -> tuple[int, ...]:
    """``"0.21.0rc1"`` -> ``(0, 21, 0)``: the numeric release, for ordering and range checks."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break  # "0rc1": the pre-release tag ends the numeric part
    return tuple(parts)


def load_profile_file(path: Path) -> ContainerProfile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ProfileError(f"cannot read profile {path}: {error}", hint="fix the TOML syntax") from None
    try:
        profile = ContainerProfile.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ProfileError(f"profile {path.name}: {where}: {first['msg']}",
                           hint="see lmi_build/trtllm/profile_schema.py for the fields") from None
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
    profiles.sort(key=lambda p: (version_key(p.tensorrt_llm), version_key(p.lmi_version), p.name))
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
