"""The model-source contract: any user-given model reference resolves to a local directory plus
an identity. Implementations (local, hf, s3, demo) live beside this file; ``resolve`` picks one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmi_build.core.types import ModelIdentity


@dataclass(frozen=True)
class ResolvedSource:
    path: Path  # a local directory holding config.json (+ tokenizer, weights when fetched)
    identity: ModelIdentity
    # The files of the source a build reads (relative names), whatever a plan fetched of them: what the
    # plan knows of the files it does not download (the tokenizer's, the weights).
    files: tuple[str, ...]
