"""What a family's TensorRT-LLM example supports per release (``data/families.toml``, cited): the dtypes its
support matrix lists and the oldest GPU SM its kernels run on. The plan builds a listed dtype (a default
outside the list becomes the first listed; one the user set is refused) and refuses a GPU below the SM."""

from functools import lru_cache
from pathlib import Path

from pydantic import field_validator

from lmi_build.core.tables import load_table
from lmi_build.core.types import Record
from lmi_build.core.versions import parse_version, release

FAMILIES_FILE = Path(__file__).with_name("data") / "families.toml"


class FamilyLimits(Record):
    min: str  # the first TensorRT-LLM release these hold for (a pre-release counts)
    max: str | None = None  # exclusive
    dtypes: tuple[str, ...] | None = None  # torch dtype names ("bfloat16", ...)
    min_sm: int | None = None
    needs: str | None = None  # what needs min_sm
    sources: tuple[str, ...]
    inferred: str | None = None

    @field_validator("min", "max")
    @classmethod
    def _pep440(cls, value: str | None) -> str | None:
        if value is not None:
            parse_version(value)
        return value

    def covers(self, tensorrt_llm: str) -> bool:
        version = release(tensorrt_llm)
        return release(self.min) <= version and (self.max is None or version < release(self.max))


class Family(Record):
    releases: tuple[FamilyLimits, ...]


class FamiliesFile(Record):
    families: dict[str, Family] = {}


@lru_cache(maxsize=1)
def _families() -> FamiliesFile:
    return load_table(FAMILIES_FILE, FamiliesFile)


def family_limits(example: str | None, tensorrt_llm: str) -> FamilyLimits | None:
    """The limits of recipe example ``example`` on this TensorRT-LLM release, if any are recorded."""
    family = _families().families.get(example or "")
    if family is None:
        return None
    return next((limits for limits in family.releases if limits.covers(tensorrt_llm)), None)
