"""The schema of a container profile (``profiles/<name>.toml``): one LMI TensorRT-LLM container.

Profiles are data: which image, which TensorRT-LLM/TensorRT/CUDA versions, which artifact layout
the container loads without compiling, and the defaults that changed between releases.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from lmi_build.versions import parse_lmi_version, parse_version

DEFAULT_KEYS = frozenset({"tokens_per_block", "max_num_tokens", "max_rolling_batch_size", "max_batch_size",
                          "max_seq_len"})


class ContainerProfile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # e.g. "lmi-0.27.0-trtllm-0.8.0"
    lmi_version: str  # DJL Serving / LMI release, e.g. "0.27.0"
    image: str  # full image URI
    tensorrt_llm: str  # e.g. "0.8.0"
    tensorrt: str  # e.g. "9.2.0.post12.dev5"
    cuda: str  # e.g. "12.2"
    python: str  # e.g. "3.10"
    transformers: str | None = None  # the transformers version inside the container, when known
    # "toolkit": <repo>/tensorrt_llm/{1/, config.pbtxt, HF files}; "flat": LLM-API engine dir.
    layout: Literal["toolkit", "flat"]
    # "legacy": per-model examples/<model>/build.py (0.7.x); "checkpoint": convert_checkpoint.py +
    # trtllm-build (>= 0.8); "llmapi": checkpoint + trtllm-build, LLM API runtime (1.x).
    workflow: Literal["legacy", "checkpoint", "llmapi"]
    engine_capable: bool = True  # False for profiles whose TensorRT-LLM has no engine backend
    # False for a moving (nightly) image tag: listed and selectable, but never the default profile.
    released: bool = True
    # Defaults of this release ("tokens_per_block" = "64", ...), each cited in the file. LMI option
    # names (tokens_per_block, max_num_tokens, max_rolling_batch_size) replace the option table's
    # default in a plan (the container's own JIT value); max_batch_size is trtllm-build's own default
    # (shown by `profiles show`); max_seq_len = "model": lengths.SEQ_LEN_FROM_MODEL.
    defaults: dict[str, str] = {}
    # Where each fact comes from (release notes, Dockerfile path@commit).
    sources: tuple[str, ...] = ()
    notes: str = ""

    @field_validator("tensorrt_llm")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)  # ordering and range checks compare it (lmi_build.versions)
        return value

    @field_validator("defaults")
    @classmethod
    def _default_keys(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - DEFAULT_KEYS)
        if unknown:
            raise ValueError(f"unknown [defaults] key(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULT_KEYS))}")
        return value

    @field_validator("lmi_version")
    @classmethod
    def _lmi_version(cls, value: str) -> str:
        parse_lmi_version(value)
        return value

    def versions(self) -> dict[str, str]:
        found = {"tensorrt_llm": self.tensorrt_llm, "tensorrt": self.tensorrt, "cuda": self.cuda,
                 "python": self.python, "lmi": self.lmi_version}
        if self.transformers:
            found["transformers"] = self.transformers
        return found
