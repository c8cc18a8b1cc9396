"""What a TensorRT-LLM release has only from some version on (``data/since.toml``): RoPE scaling types
its attention layer reads, architectures in its model table. A plan for an older profile is refused,
naming the oldest profile that has it, instead of the vendor tool stopping mid-build.
"""

from functools import lru_cache
from pathlib import Path

from pydantic import field_validator

from lmi_build.core.tables import load_table
from lmi_build.core.types import Record
from lmi_build.core.versions import parse_version, release
from lmi_build.targets.trtllm.profiles import load_profiles

SINCE_FILE = Path(__file__).with_name("data") / "since.toml"


class WrittenAs(Record):
    """The checkpoint architecture a release's own converter writes for the family before ``until``
    (exclusive), while MODEL_MAP does not have the family's own name yet."""

    architecture: str
    until: str

    @field_validator("until")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)
        return value


class Since(Record):
    what: str
    since: str  # the first TensorRT-LLM release that has it (a pre-release of it counts)
    sources: tuple[str, ...]
    written_as: WrittenAs | None = None

    @field_validator("since")
    @classmethod
    def _pep440(cls, value: str) -> str:
        parse_version(value)
        return value

    def missing_in(self, tensorrt_llm: str) -> bool:
        return release(tensorrt_llm) < release(self.since)


class SinceFile(Record):
    # config.json rope_scaling.rope_type (or .type, or option.rotary_scaling_type), lower case.
    rope_scaling: dict[str, Since] = {}
    # The TensorRT-LLM checkpoint "architecture" (recipes' trtllm_architecture): MODEL_MAP keys.
    architectures: dict[str, Since] = {}


@lru_cache(maxsize=1)
def _since_file() -> SinceFile:
    return load_table(SINCE_FILE, SinceFile)


def missing_scaling(scaling_type: str | None, tensorrt_llm: str) -> Since | None:
    """The entry of RoPE scaling ``scaling_type`` when TensorRT-LLM ``tensorrt_llm`` is older than it; else None."""
    entry = _since_file().rope_scaling.get(scaling_type.lower()) if scaling_type else None
    return entry if entry is not None and entry.missing_in(tensorrt_llm) else None


def missing_architecture(architecture: str | None, tensorrt_llm: str) -> Since | None:
    """The entry of checkpoint ``architecture`` when TensorRT-LLM ``tensorrt_llm``'s model table lacks it; else None."""
    entry = _since_file().architectures.get(architecture) if architecture else None
    return entry if entry is not None and entry.missing_in(tensorrt_llm) else None


def written_otherwise(architecture: str | None, tensorrt_llm: str) -> bool:
    """Whether TensorRT-LLM ``tensorrt_llm``'s model table lacks ``architecture`` while its own converter
    builds the family under another name (``written_as``): then ModelOpt's export, which writes the HF
    architecture, cannot be built, and the release's converter is the route."""
    return checkpoint_architecture(architecture, tensorrt_llm) != architecture


def checkpoint_architecture(architecture: str | None, tensorrt_llm: str) -> str | None:
    """The "architecture" TensorRT-LLM ``tensorrt_llm``'s converter writes for recipe architecture
    ``architecture``: the recipe's own name, or the entry's ``written_as`` before its ``until``."""
    entry = _since_file().architectures.get(architecture) if architecture else None
    if entry is None or entry.written_as is None or release(tensorrt_llm) >= release(entry.written_as.until):
        return architecture
    return entry.written_as.architecture


def refusal(entry: Since, profile: str, tensorrt_llm: str) -> tuple[str, str]:
    """The one-line refusal (and its hint) of a profile whose TensorRT-LLM lacks ``entry``, naming the
    oldest released profile that has it: the plan's error and ``recipes list --profile``'s reason."""
    newer = [p.name for p in load_profiles() if p.released and p.engine_capable and not entry.missing_in(p.tensorrt_llm)]
    where = f"; profile {newer[0]} is the oldest that has it" if newer else "; no installed profile has it"
    message = f"{entry.what} needs TensorRT-LLM {entry.since} or newer, profile {profile} has {tensorrt_llm}{where}"
    hint = f"plan with --profile {newer[0]} or newer" if newer else "add a profile with a newer TensorRT-LLM"
    return message, hint
