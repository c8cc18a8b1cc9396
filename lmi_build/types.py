"""Value types shared by every layer: plan messages, model identity, target names.

They sit at the bottom of the layer order (see ``docs/DESIGN.md``) so that options, recipes,
sources and storage can report problems and name models without importing the planner.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict

from lmi_build.target_names import TARGET_NAMES, TargetName

__all__ = ["TARGET_NAMES", "ModelIdentity", "PlanMessage", "RunnerKind", "TargetName"]



class PlanMessage(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str  # stable, e.g. "tp_heads", "max_len_positions", "quantize_unsupported"
    message: str  # one line, with the numbers
    hint: str | None = None  # what to do


# Where a build's vendor steps run (a runner of lmi_build.runners; --runner of the build commands).
RunnerKind = Literal["local", "docker", "script"]


class ModelIdentity(BaseModel):
    """Who the model is: part of the cache key and of the manifest. Never a host path."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["local", "hf", "s3", "demo"]
    id: str  # HF id, s3:// URL, demo:<name>, or the local directory's name (not its path)
    revision: str | None = None  # HF commit sha, S3 manifest digest, ...
    digest: str | None = None  # content digest over the files the build reads ("sha256:...")
