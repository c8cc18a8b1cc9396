"""A model on the Hugging Face Hub, ``org/name[@revision]``, through huggingface_hub.

Online, the file list and hashes come from the Hub's repo info (LFS sha256 / git blob ids), so
the digest costs one API call, not a read of the weights. Offline (``HF_HUB_OFFLINE=1``), they
come from the local cache, whose blob file names ARE those hashes. The hub settings (``HF_HOME``,
``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, ``HF_TOKEN``) are huggingface_hub's own, read
once from its ``constants`` so lmi-build and the downloads agree; the token is never printed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import requests
from huggingface_hub import HfApi, constants, errors, snapshot_download
from huggingface_hub.utils import disable_progress_bars

from lmi_build.core.errors import SourceError
from lmi_build.core.hashing import sha256_file, tree_digest
from lmi_build.core.types import ModelIdentity
from lmi_build.reporting.output import Mode, current
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.local import list_relative
from lmi_build.sources.select import has_weights, select_build_files, select_plan_files

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GITSHA = re.compile(r"^[0-9a-f]{40}$")


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE``, as huggingface_hub parsed it when it was imported."""
    return constants.HF_HUB_OFFLINE


def hub_cache_dir() -> Path:
    """The hub cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    return Path(constants.HF_HUB_CACHE)


def hub_endpoint() -> str:
    """The Hub or mirror that is asked (``HF_ENDPOINT``, default https://huggingface.co)."""
    return constants.ENDPOINT


def _quiet_downloads() -> None:
    """huggingface_hub draws tqdm bars on stderr; --quiet and --json runs want none."""
    if current().mode is not Mode.HUMAN:
        disable_progress_bars()


def _hub_error(exc: Exception, repo_id: str, revision: str | None) -> SourceError | None:
    name = f"'{repo_id}'" + (f" at revision '{revision}'" if revision else "")
    if isinstance(exc, errors.GatedRepoError):
        return SourceError(f"Hugging Face model {name} is gated",
                           hint="accept its license on huggingface.co and set HF_TOKEN")
    if isinstance(exc, errors.RevisionNotFoundError):
        return SourceError(f"revision '{revision}' of Hugging Face model '{repo_id}' does not exist",
                           hint="check the branch, tag or commit sha")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return SourceError(f"Hugging Face model '{repo_id}' not found",
                           hint="check the id; for a private model set HF_TOKEN; for a local directory check the path")
    if isinstance(exc, (errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError)):
        return SourceError(f"Hugging Face model {name} is not in the local cache ({hub_cache_dir()})",
                           hint="download it once with network access, or unset HF_HUB_OFFLINE")
    if isinstance(exc, errors.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        return SourceError(f"the Hugging Face Hub ({hub_endpoint()}) answered HTTP {status} for {name}",
                           hint="retry later, or set HF_HUB_OFFLINE=1 to use the local cache")
    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return SourceError(f"cannot reach the Hugging Face Hub at {hub_endpoint()}",
                           hint="check the network or proxy, or set HF_HUB_OFFLINE=1 to use the local cache")
    return None


def _blob_hash(path: Path) -> str:
    """The hash the cache stores a file under: sha256 for LFS files, git blob sha1 for the rest."""
    if path.is_symlink():
        blob = Path(os.readlink(path)).name
        if _SHA256.match(blob):
            return f"sha256:{blob}"
        if _GITSHA.match(blob):
            return f"gitsha1:{blob}"
    return f"sha256:{sha256_file(path)}"  # not a cache symlink (copied files): hash the content


def _resolve_offline(repo_id: str, revision: str | None, purpose: str, allow_pickle: bool) -> ResolvedSource:
    path = Path(snapshot_download(repo_id, revision=revision, cache_dir=hub_cache_dir(), local_files_only=True))
    names = list_relative(path)
    if "config.json" not in names:
        raise SourceError(f"the cached snapshot of '{repo_id}' has no config.json",
                          hint="download the model once with network access, or unset HF_HUB_OFFLINE")
    build_files = select_build_files(names, source=f"Hugging Face model '{repo_id}'", allow_pickle=allow_pickle)
    if purpose == "build" and not has_weights(build_files):
        raise SourceError(f"the cached snapshot of '{repo_id}' has no weights",
                          hint="download the model once with network access, or unset HF_HUB_OFFLINE")
    digest = tree_digest((rel, _blob_hash(path / rel)) for rel in build_files)
    return ResolvedSource(path=path, identity=ModelIdentity(kind="hf", id=repo_id, revision=path.name, digest=digest),
                          files=tuple(build_files))


def _resolve_online(repo_id: str, revision: str | None, purpose: str, allow_pickle: bool) -> ResolvedSource:
    info: Any = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    siblings = {s.rfilename: s for s in (info.siblings or [])}
    if "config.json" not in siblings:
        raise SourceError(f"Hugging Face model '{repo_id}' has no config.json",
                          hint="lmi-build needs a transformers-style repository")
    build_files = select_build_files(siblings, source=f"Hugging Face model '{repo_id}'", allow_pickle=allow_pickle)
    if purpose == "build" and not has_weights(build_files):
        raise SourceError(f"Hugging Face model '{repo_id}' has no weight files", hint="check the repository")

    def file_hash(name: str) -> str:
        sibling = siblings[name]
        if sibling.lfs is not None:
            return f"sha256:{sibling.lfs.sha256}"
        return f"gitsha1:{sibling.blob_id}"

    digest = tree_digest((name, file_hash(name)) for name in build_files)
    wanted = build_files if purpose == "build" else select_plan_files(siblings)
    # Pin the download to the commit the digest describes, even if the branch moves meanwhile.
    path = Path(snapshot_download(repo_id, revision=info.sha, cache_dir=hub_cache_dir(), allow_patterns=wanted))
    return ResolvedSource(path=path, identity=ModelIdentity(kind="hf", id=repo_id, revision=info.sha, digest=digest),
                          files=tuple(build_files))


def resolve_hf(repo_id: str, *, revision: str | None, purpose: Literal["plan", "build"],
               allow_pickle: bool = False) -> ResolvedSource:
    _quiet_downloads()
    try:
        if hub_offline():
            return _resolve_offline(repo_id, revision, purpose, allow_pickle)
        return _resolve_online(repo_id, revision, purpose, allow_pickle)
    except SourceError:
        raise
    except Exception as exc:
        translated = _hub_error(exc, repo_id, revision)
        if translated is None:
            raise
        raise translated from exc
