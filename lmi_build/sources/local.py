"""A model in a local directory (a Hugging Face style folder: config.json, tokenizer, weights)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Literal

from lmi_build.core.errors import SourceError
from lmi_build.core.hashing import tree_digest
from lmi_build.core.paths import name_text
from lmi_build.core.reading import read_json_file
from lmi_build.core.types import ModelIdentity
from lmi_build.model.safetensors_header import read_checked_header
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.digest_cache import cached_sha256
from lmi_build.sources.select import has_weights, select_build_files


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


def check_names(root: Path, listed: list[str]) -> None:
    """Every name under the model directory is UTF-8 (a manifest, S3 key and the container's Python
    all need it) and every link resolves (a loop or a dangling link fails here, not mid-build)."""
    for rel in listed:
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise SourceError(f"{root}/{shown} has a name that is not valid UTF-8",
                              hint="rename the file (S3 keys and the serving container need UTF-8 names)") from None
        entry = root / rel
        if entry.is_symlink():
            try:
                entry.stat()
            except OSError as error:
                why = "a symbolic link loop" if error.errno == errno.ELOOP else "a dangling symbolic link"
                raise SourceError(f"{root}/{rel} is {why}", hint="replace the link with the file it should name") \
                    from None


def check_regular_files(root: Path, selected: list[str]) -> None:
    """The files a build reads are regular files: a FIFO or device would block or never end."""
    for rel in selected:
        mode = (root / rel).stat().st_mode
        if not stat.S_ISREG(mode):
            raise SourceError(f"{root}/{rel} is not a regular file (a pipe, device or socket)",
                              hint="replace it with the real file")


def check_weights(root: Path, selected: list[str]) -> None:
    """The weights are what they claim: every safetensors header obeys the format, and the weight
    index names only shards inside the model directory that are there."""
    for rel in selected:
        if rel.endswith(".safetensors"):
            try:
                read_checked_header(root / rel)
            except (OSError, ValueError) as error:
                raise SourceError(f"{root}/{rel} is not a valid safetensors file: {error}",
                                  hint="re-download or re-export the weights") from None
    for rel in selected:
        if not rel.endswith(".safetensors.index.json"):
            continue
        try:
            index = read_json_file(root / rel, what="weight index")
        except ValueError as error:
            raise SourceError(str(error), hint="re-download the weight index") from None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise SourceError(f"{root}/{rel} has no weight_map", hint="re-download the weight index")
        base = PurePosixPath(rel).parent
        for shard in sorted({str(value) for value in weight_map.values()}):
            target = PurePosixPath(shard)
            if target.is_absolute() or ".." in target.parts or (base / target).as_posix() not in selected:
                raise SourceError(f"{root}/{rel} maps tensors to {shard[:80]!r}, which is not a weight file "
                                  "inside the model directory", hint="fix or re-download the weight index")


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
    listed = list_relative(path)
    check_names(path, listed)
    selected = select_build_files(listed, source=f"model directory '{name}'", allow_pickle=allow_pickle)
    check_regular_files(path, selected)
    if purpose == "build" and not has_weights(selected):
        raise SourceError(f"no weights (*.safetensors) in {path}", hint="add the model's weight files")
    if purpose == "build":
        check_weights(path, selected)
    hashes = cached_sha256([path / rel for rel in selected])
    digest = tree_digest((rel, hashes[path / rel]) for rel in selected)
    return ResolvedSource(path=path, identity=ModelIdentity(kind="local", id=name_text(name), digest=digest),
                          files=tuple(selected))
