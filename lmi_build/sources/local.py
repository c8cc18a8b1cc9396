"""A model in a local directory (a Hugging Face style folder: config.json, tokenizer, weights)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from lmi_build.errors import SourceError
from lmi_build.hashing import tree_digest
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.digest_cache import cached_sha256
from lmi_build.sources.select import has_weights, select_build_files
from lmi_build.types import ModelIdentity


def list_relative(root: Path) -> list[str]:
    """Every file under root as a relative POSIX path (symlinked files followed, hidden dirs skipped)."""
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            names.append((Path(dirpath) / name).relative_to(root).as_posix())
    return names


def links_leaving(root: Path) -> list[str]:
    """Symbolic links under ``root`` (files or directories) whose target is outside ``root``: a
    ``tokenizer_config.json -> /etc/passwd`` would otherwise be hard-linked into the artifact and published."""
    real_root = Path(os.path.realpath(root))
    leaving: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted([*dirnames, *filenames]):
            entry = Path(dirpath) / name
            if not entry.is_symlink():
                continue
            target = Path(os.path.realpath(entry))
            if target != real_root and real_root not in target.parents:
                leaving.append(entry.relative_to(root).as_posix())
    return sorted(leaving)


def resolve_local(path: Path, *, purpose: Literal["plan", "build"], allow_pickle: bool = False) -> ResolvedSource:
    path = path.expanduser()
    if not path.exists():
        raise SourceError(f"model directory {path} does not exist", hint="check the path")
    if not path.is_dir():
        raise SourceError(f"{path} is not a directory", hint="point at a model directory holding config.json")
    if not (path / "config.json").is_file():
        raise SourceError(f"no config.json in {path}",
                          hint="point at a Hugging Face style model directory (config.json, tokenizer, weights)")
    leaving = links_leaving(path)
    if leaving:
        more = f" (+{len(leaving) - 1} more)" if len(leaving) > 1 else ""
        raise SourceError(f"{path}/{leaving[0]} is a symbolic link to a file outside the model directory{more}",
                          hint="replace the link with a copy of the file it points to")
    name = path.resolve().name
    selected = select_build_files(list_relative(path), source=f"model directory '{name}'", allow_pickle=allow_pickle)
    if purpose == "build" and not has_weights(selected):
        raise SourceError(f"no weights (*.safetensors) in {path}", hint="add the model's weight files")
    hashes = cached_sha256([path / rel for rel in selected])
    digest = tree_digest((rel, hashes[path / rel]) for rel in selected)
    return ResolvedSource(path=path, identity=ModelIdentity(kind="local", id=name, digest=digest))
