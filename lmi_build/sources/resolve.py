"""``resolve_source``: any model reference -> a local directory plus an identity.

``demo:<name>`` built-in tiny models, ``s3://bucket/prefix``, an existing local directory, or a
Hugging Face id ``org/name[@revision]``. ``purpose="plan"`` fetches only config.json and small
metadata; ``"build"`` fetches everything the build reads. Both give the same identity.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from lmi_build.core.errors import SourceError
from lmi_build.core.types import ModelIdentity
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.demo import demo_digest, demo_files, demo_revision, ensure_demo_model
from lmi_build.sources.local import resolve_local
from lmi_build.sources.s3 import resolve_s3

_HF_ID = re.compile(r"^(?:[A-Za-z0-9][\w.\-]{0,95}/)?[A-Za-z0-9][\w.\-]{0,95}$")


def _looks_local(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~", ".\\")) or ref in (".", "..") or Path(ref).expanduser().exists()


def split_revision(ref: str, revision: str | None) -> tuple[str, str | None]:
    name, at, inline = ref.partition("@")
    if not at:
        return ref, revision
    if not inline:
        raise SourceError(f"empty revision in {ref!r}", hint="write org/name@<branch, tag or commit sha>")
    if revision is not None and revision != inline:
        raise SourceError(f"two revisions given for {name}: '@{inline}' and revision '{revision}'",
                          hint="give the revision once")
    return name, inline


def resolve_source(
    ref: str,
    *,
    purpose: Literal["plan", "build"],
    revision: str | None = None,
    allow_pickle: bool = False,
    endpoint_url: str | None = None,
) -> ResolvedSource:
    ref = ref.strip()
    if not ref:
        raise SourceError("no model given", hint="pass a directory, an HF id (org/name), s3://bucket/prefix or demo:<name>")
    if ref.startswith("demo:"):
        _no_revision(ref, revision)
        name = ref[len("demo:") :]
        path = ensure_demo_model(name, with_weights=purpose == "build")
        identity = ModelIdentity(kind="demo", id=ref, revision=demo_revision(), digest=demo_digest(name))
        return ResolvedSource(path=path, identity=identity, files=demo_files(path))
    if ref.startswith("s3://"):
        _no_revision(ref, revision)
        return resolve_s3(ref, purpose=purpose, endpoint_url=endpoint_url, allow_pickle=allow_pickle)
    if "://" in ref:
        raise SourceError(f"unsupported model URL {ref!r}", hint="use s3://, an HF id, a directory or demo:<name>")
    if _looks_local(ref):
        _no_revision(ref, revision)
        return resolve_local(Path(ref), purpose=purpose, allow_pickle=allow_pickle)
    repo_id, rev = split_revision(ref, revision)
    if not _HF_ID.match(repo_id):
        raise SourceError(f"{ref!r} is neither an existing directory nor a Hugging Face id",
                          hint="pass a directory, an HF id (org/name[@revision]), s3://bucket/prefix or demo:<name>")

    # huggingface_hub and requests are ~290 modules, a third more start-up for every `plan` of a
    # local, demo or s3 model: only a Hugging Face id loads them.
    from lmi_build.sources.hf import resolve_hf

    return resolve_hf(repo_id, revision=rev, purpose=purpose, allow_pickle=allow_pickle)


def _no_revision(ref: str, revision: str | None) -> None:
    if revision is not None:
        raise SourceError(f"a revision was given for {ref}, but revisions apply only to Hugging Face models",
                          hint="drop the revision")
