"""What a runner executes: a ``Step`` (an argv with directory placeholders), the host ``Paths``
those placeholders bind to, and the ``StepResult`` it reports. Every target's steps use these."""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lmi_build.core.types import FrozenModel

DEFAULT_TIMEOUT_S = 4 * 3600


class Step(FrozenModel):
    name: str  # "checkpoint", "quantize", "engine", "compile"; also the log file name
    argv: list[str]  # placeholders in braces ({model}, {engine}, {workers}, ...)
    where: Literal["host", "container"]
    tool: str | None = None  # the target's flag-table tool this argv was validated against
    # Run in this process by the target itself (e.g. "ModelOpt checkpoint export"), never by a runner:
    # what it does, in words, for logs and scripts. None: a vendor tool's argv.
    in_process: str | None = None
    cwd: str | None = None
    env: dict[str, str] = {}
    inputs: list[str] = []  # placeholder names read
    outputs: list[str] = []  # placeholder names written (removed again on failure)
    timeout_s: int = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class StepResult:
    name: str
    seconds: float
    where: str
    log: Path | None
    detail: str | None = None


@dataclass(frozen=True)
class Dir:
    """How one placeholder directory is seen outside this host."""

    mount: str  # its path inside the container (docker runner and containerised scripts)
    variable: str  # the shell variable a generated script reads it from


def default_dir(name: str) -> Dir:
    return Dir(mount=f"/work/{name}", variable=f"{name.upper()}_DIR")


class Paths:
    """The host directories a build reads and writes, by placeholder name.

    A target names its own directories (``model``, ``checkpoint``, ``engine``; ``compiled``, ...)
    and may give a directory its own container mount or script variable through ``dirs``.
    """

    def __init__(self, dirs: Mapping[str, Dir] | None = None, **paths: Path | None) -> None:
        self._paths = dict(paths)
        self._dirs = dict(dirs or {})

    def get(self, name: str) -> Path | None:
        return self._paths.get(name)

    def __getattr__(self, name: str) -> Path | None:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._paths.get(name)

    def names(self) -> list[str]:
        return list(self._paths)

    def dir(self, name: str) -> Dir:
        return self._dirs.get(name) or default_dir(name)

    def replace(self, **paths: Path | None) -> "Paths":
        return Paths(self._dirs, **{**self._paths, **paths})


def bind(argv: list[str], values: Mapping[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in every argument."""
    bound: list[str] = []
    for arg in argv:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", value)
        bound.append(arg)
    return bound
