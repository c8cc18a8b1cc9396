"""A target's own part of how a build runs, and its build command, declared by the target: each field of
its ``RunSettings`` subclass with a ``build_flag`` is a flag of its build command (``lmi_build.cli.build_cmd``
makes them, in the subclass's order, as ``with_knobs`` makes the knobs'). The base class's fields are read by
shared code (the pipeline, a fleet job); a target whose command takes one as a flag declares it again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from lmi_build.core.types import RunnerKind

Until = Literal["checkpoint", "artifact"]


@dataclass(frozen=True)
class BuildFlag:
    """How a ``RunSettings`` field is given on the target's build command."""

    flag: str  # "--engine-dir"
    help: str
    min: int | None = None


def build_flag(default: Any, flag: str, help: str, *, min: int | None = None) -> Any:
    """A ``RunSettings`` field that is a flag of the target's build command."""
    return field(default=default, metadata={"flag": BuildFlag(flag, help, min)})


@dataclass(frozen=True)
class RunSettings:
    """How a target's build runs, beyond what every build shares (``BuildSettings``)."""

    until: Until = "artifact"  # "checkpoint": stop after the checkpoint, where the target has one
    runner: RunnerKind = "local"  # where the vendor steps run
    step_timeout_s: int | None = None  # overrides each vendor step's own timeout

    def input_dirs(self) -> dict[str, Path | None]:
        """The user's directories the build reads, by what they are: an --overwrite never replaces them."""
        return {}

    @classmethod
    def flag_fields(cls) -> Iterator[tuple[Field[Any], BuildFlag]]:
        """The fields that are flags, with their declarations, in the order the class declares them."""
        by_name = {declared.name: declared for declared in fields(cls)}
        for name in vars(cls).get("__annotations__", {}):
            how = by_name[name].metadata.get("flag")
            if isinstance(how, BuildFlag):
                yield by_name[name], how


Settings = TypeVar("Settings", bound=RunSettings)


def narrowed(settings: RunSettings, kind: type[Settings]) -> Settings:
    """``settings`` as the calling target's own type (its build command made them)."""
    if not isinstance(settings, kind):
        raise TypeError(f"{type(settings).__name__} given where {kind.__name__} is needed")
    return settings


@dataclass(frozen=True)
class BuildCommand:
    """A target's build command (``lmi-build <target>``) as its --help shows it; its flags are its
    ``settings``' build flags, the knobs it takes and the flags every build command takes."""

    help: str
    epilog: str
    settings: type[RunSettings] = RunSettings
