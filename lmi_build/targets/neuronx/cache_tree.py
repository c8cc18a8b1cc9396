"""The Neuron compile cache tree (``NEURON_COMPILE_CACHE_URL``):
``neuronxcc-<version>[+<hash>]/MODULE_<hlo hash>+<flags hash>/{model.neff, model.done, ...}``.

A failed compile leaves ``model.log`` (and the cache remembers the failure); a compile in
progress holds a ``*.lock``. Neither may ship: the serving container would replay the failure or
wait on the lock. (facts §5 "Compiler flags".)
"""

from __future__ import annotations

import shutil
from pathlib import Path

COMPLETE_FILES = ("model.neff", "model.done")
FAILED_FILE = "model.log"


def module_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("neuronxcc-*/MODULE_*") if p.is_dir())


def entry_problem(module: Path) -> str | None:
    """Why a MODULE_ directory is not a usable cache entry (None when it is)."""
    if any(module.glob("*.lock")):
        return "locked (a compile was still running)"
    if (module / FAILED_FILE).exists() and not (module / "model.neff").exists():
        return "a failed compile (model.log, no model.neff)"
    missing = [name for name in COMPLETE_FILES if not (module / name).is_file()]
    if missing:
        return f"incomplete (no {', '.join(missing)})"
    return None


def remove_unusable(root: Path) -> list[str]:
    """Remove failed, locked and incomplete entries; return what was removed (relative names)."""
    removed: list[str] = []
    for module in module_dirs(root):
        if entry_problem(module) is not None:
            shutil.rmtree(module)
            removed.append(module.relative_to(root).as_posix())
    return removed


def check_tree(root: Path) -> list[tuple[str, str]]:
    """(entry, problem) for every unusable entry; a tree without any entry is one problem too."""
    modules = module_dirs(root)
    if not modules:
        return [(root.name or ".", "no neuronxcc-*/MODULE_* entries")]
    return [(module.relative_to(root).as_posix(), problem) for module in modules
            if (problem := entry_problem(module)) is not None]


def compiler_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("neuronxcc-*") if p.is_dir())
