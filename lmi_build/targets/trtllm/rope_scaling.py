"""RoPE scaling types a TensorRT-LLM release handles only from some version on (``data/rope_scaling.toml``).

A checkpoint whose ``rotary_scaling`` the release's attention layer cannot read stops trtllm-build
(KeyError 'type' for Llama 3.x RoPE before 0.12): refused at plan time instead, with the profile to use.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from lmi_build.tables import load_table
from lmi_build.versions import parse_version, release

ROPE_SCALING_FILE = Path(__file__).with_name("data") / "rope_scaling.toml"


class ScalingSince(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    what: str
    since: str  # the first TensorRT-LLM release that handles it (a pre-release of it counts)
    sources: tuple[str, ...]

    @field_validator("since")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)
        return value


class RopeScalingFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    types: dict[str, ScalingSince]


@lru_cache(maxsize=1)
def _rope_file() -> RopeScalingFile:
    return load_table(ROPE_SCALING_FILE, RopeScalingFile)


def missing_scaling(scaling_type: str | None, tensorrt_llm: str) -> ScalingSince | None:
    """The table's entry for ``scaling_type`` when TensorRT-LLM ``tensorrt_llm`` is older than it; else None."""
    if not scaling_type:
        return None
    entry = _rope_file().types.get(scaling_type.lower())
    if entry is None or release(tensorrt_llm) >= release(entry.since):
        return None
    return entry
