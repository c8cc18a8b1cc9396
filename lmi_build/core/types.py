"""Value types shared by every layer: plan messages, model identity, target names, the model bases.

They sit at the bottom of the layer order (see ``docs/DESIGN.md``) so that options, recipes,
sources and storage can report problems and name models without importing the planner.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from lmi_build.core.errors import bounded
from lmi_build.core.target_names import TARGET_NAMES, TargetName

__all__ = ["TARGET_NAMES", "FrozenModel", "ModelIdentity", "PlanMessage", "Record", "RunnerKind", "TargetName"]


# defer_build: a model's validator is built when it first validates, not at import; a command pays only for the
# models it uses (plan uses 22 of about 130: 73 M of its 1,920 M start-up instructions, benchmarks/startup.py).


class FrozenModel(BaseModel):
    """A pydantic model whose instances never change; unknown fields are ignored (pydantic's default)."""

    model_config = ConfigDict(frozen=True, defer_build=True)


class Record(BaseModel):
    """A frozen pydantic model that refuses unknown fields: a misspelt key is an error, not a default."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class PlanMessage(FrozenModel):
    code: str  # stable, e.g. "tp_heads", "max_len_positions", "quantize_unsupported"
    message: str  # one line, with the numbers
    hint: str | None = None  # what to do

    @field_validator("message", "hint")
    @classmethod
    def _bounded(cls, text: str | None) -> str | None:
        """A message built from what the user gave stays bounded in the plan, its JSON and its file."""
        return None if text is None else bounded(text)


# Where a build's vendor steps run (a runner of lmi_build.runners; --runner of the build commands).
RunnerKind = Literal["local", "docker", "script"]


class ModelIdentity(FrozenModel):
    """Who the model is: part of the cache key and of the manifest. Never a host path."""

    kind: Literal["local", "hf", "s3", "demo"]
    id: str  # HF id, s3:// URL, demo:<name>, or the local directory's name (not its path)
    revision: str | None = None  # HF commit sha, S3 manifest digest, ...
    digest: str | None = None  # content digest over the files the build reads ("sha256:...")
