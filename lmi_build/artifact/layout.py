"""The layout contract: where each produced file goes and what serving.properties needs.

Targets register their layouts here from their packages' ``layouts`` modules. The packager only
talks to this interface.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from lmi_build.errors import UnknownName
from lmi_build.planning.plan import BuildPlan
from lmi_build.types import PlanMessage


class Layout(Protocol):
    name: str

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        """Place the produced files (engine dir, checkpoint, ...) and the carried source files
        (tokenizer, generation config, chat templates, custom code) under ``staging``. Use
        ``lmi_build.fs.link_or_copy`` for every file."""

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        """serving.properties keys this layout needs on top of the plan's options."""

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        """Structural completeness problems of an artifact of this layout (empty when complete)."""


_LAYOUTS: dict[str, Layout] = {}


def register_layout(layout: Layout) -> Layout:
    _LAYOUTS[layout.name] = layout
    return layout


def get_layout(name: str) -> Layout:
    _load_builtin_layouts()
    try:
        return _LAYOUTS[name]
    except KeyError:
        known = ", ".join(sorted(_LAYOUTS)) or "none"
        raise UnknownName(f"unknown artifact layout '{name}'", hint=f"known layouts: {known}") from None


def _load_builtin_layouts() -> None:
    # Each target package's ``layouts`` module registers its layouts; the artifact layer reaches
    # the targets only through the registry's names (docs/DESIGN.md, the layer contract).
    import importlib

    from lmi_build.planning.targets import TARGET_PACKAGES

    for package in TARGET_PACKAGES.values():
        module = f"{package}.layouts"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
