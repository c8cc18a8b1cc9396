"""Container profiles: one ``data/profiles/<name>.toml`` per LMI TensorRT-LLM container, and their schema.

Profiles are data: which image, which TensorRT-LLM/TensorRT/CUDA versions, which artifact layout
the container loads without compiling, and the defaults that changed between releases. They are
read without heavy imports (``plan`` and ``--help`` call this) by ``lmi_build.core.container_profiles``
and validated against ``ContainerProfile``; a malformed file is a clear error naming the file.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from lmi_build.core import container_profiles
from lmi_build.core.container_profiles import ContainerRelease
from lmi_build.core.errors import UnknownName, UnsupportedTarget
from lmi_build.core.types import Record
from lmi_build.core.versions import parse_lmi_version, parse_version

PROFILES_DIR = Path(__file__).resolve().parent / "data" / "profiles"

DEFAULT_KEYS = frozenset({"tokens_per_block", "max_num_tokens", "max_rolling_batch_size", "max_batch_size",
                          "max_seq_len"})


class KvCacheDefault(Record):
    """How the release's runtime sizes its paged KV cache when serving.properties does not say: a
    fraction of the GPU memory free once the engine is loaded (weights and activations)."""

    free_fraction: float  # the release's default
    option: str  # the serving.properties key this release reads the fraction from
    source: str  # where the default and the key were read
    inferred: str | None = None  # what of it the source does not state


class StartupRules(Record):
    """How the release starts on a model directory (``startup.py``), each step cited."""

    path: tuple[str, ...]  # when DJL takes its TensorRT-LLM path
    detection: tuple[str, ...]  # how it detects a prebuilt engine, else JIT-builds
    recommender: tuple[str, ...]  # the batch defaults it fills
    unset_batch: int  # max_rolling_batch_size when unset and rolling_batch is not trtllm
    runtime: tuple[str, ...] = ()  # how the flat layout's service constructs LLM()
    runtime_warning: str | None = None  # a defect read in the runtime's source (a warning: the image may differ)
    # A defect of the release's own start-up, executed on its branch (tests/vendor/djl/trtllm_handler.json):
    # the release refuses every artifact (rejected), whatever lmi-build writes.
    runtime_defect: str | None = None


class ContainerProfile(ContainerRelease):
    # name: e.g. "lmi-0.27.0-trtllm-0.8.0"
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
    # False for a moving (nightly) image tag: listed and selectable, but never the default profile
    # (which is the newest published one: ``dlc``).
    released: bool = True
    # Defaults of this release ("tokens_per_block" = "64", ...), each cited in the file. LMI option
    # names (tokens_per_block, max_num_tokens, max_rolling_batch_size) replace the option table's
    # default in a plan (the container's own JIT value); max_batch_size is trtllm-build's own default
    # (shown by `profiles show`); max_seq_len = "model": lengths.SEQ_LEN_FROM_MODEL.
    defaults: dict[str, str] = Field(default_factory=dict)
    kv_cache: KvCacheDefault
    # Its start-up rules: the sources of plan's and verify --for-container's start-up messages, not
    # listed by `profiles list/show` (whose --json is the profile's other fields).
    startup: StartupRules = Field(exclude=True)
    # Where each fact comes from (release notes, Dockerfile path@commit).
    sources: tuple[str, ...] = ()
    notes: str = ""

    @field_validator("tensorrt_llm")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)  # ordering and range checks compare it (lmi_build.core.versions)
        return value

    @field_validator("defaults")
    @classmethod
    def _default_keys(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - DEFAULT_KEYS)
        if unknown:
            raise ValueError(f"unknown [defaults] key(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULT_KEYS))}")
        return value

    def versions(self) -> dict[str, str]:
        found = {"tensorrt_llm": self.tensorrt_llm, "tensorrt": self.tensorrt, "cuda": self.cuda,
                 "python": self.python, "lmi": self.lmi_version}
        if self.transformers:
            found["transformers"] = self.transformers
        return found


def load_profiles() -> list[ContainerProfile]:
    """Every profile, oldest TensorRT-LLM first. Release order: a release candidate sorts before its
    release (0.21.0rc1 < 0.21.0), so the default profile (the newest) is the final release once both
    are installed."""
    return sorted(container_profiles.load_profiles("trtllm", PROFILES_DIR, ContainerProfile),
                  key=lambda p: (parse_version(p.tensorrt_llm), parse_lmi_version(p.lmi_version), p.name))


def get_profile(name: str | None) -> ContainerProfile:
    """The named profile; ``None`` -> the newest published (a DLC) engine-capable one."""
    profiles = load_profiles()
    if name is None:
        capable = [p for p in profiles if p.engine_capable and p.released and p.published]
        if not capable:
            where = container_profiles.profiles_dir("trtllm", PROFILES_DIR)
            raise UnsupportedTarget("no engine-capable container profile of a published image is installed",
                                    hint=f"add a profile with dlc = \"<ECR URI>\" under {where}, or give --profile")
        return capable[-1]
    for profile in profiles:
        if profile.name == name:
            return profile
    known = ", ".join(p.name for p in profiles) or "none"
    raise UnknownName(f"unknown container profile '{name}'", hint=f"known profiles: {known}")
