"""Resolved LMI options: every value with the input it came from.

This is the contract between option resolution (CLI > serving.properties > env > default) and
everything downstream (planner, serving.properties writer, manifest).
"""

from collections.abc import Iterator, Mapping
from enum import Enum
from typing import TypeVar

from lmi_build.core.types import FrozenModel


class Source(str, Enum):
    """Where a resolved value came from, in precedence order (first wins)."""

    CLI = "cli"  # a dedicated flag (--tp) or --option key=value
    PROPERTIES = "properties"  # the --properties serving.properties file
    ENV = "env"  # OPTION_*, HF_MODEL_ID, TENSOR_PARALLEL_DEGREE, ... and TGI/SageMaker translations
    ALIAS = "alias"  # expanded from an alias such as engine=MPI
    RECIPE = "recipe"  # a default the architecture's recipe sets
    DEFAULT = "default"  # the LMI default from the option table
    DERIVED = "derived"  # computed by the planner (e.g. tp=max -> 8 on a p4d)


_T = TypeVar("_T")

# A typed option value, as the option table's type reads it: int, float, bool, str (str and enum
# options, and int_or_max's "max"), or a tuple of ints (int_list).
OptionValue = int | float | bool | str | tuple[int, ...]


class ResolvedValue(FrozenModel):
    key: str  # the serving.properties key, e.g. "option.tensor_parallel_degree" or "engine"
    value: str  # the value exactly as it will be written to serving.properties
    # ``value`` read once by the key's table entry (see OptionSpec.read); the text itself for a key
    # the table does not know; None when ``value`` does not parse (resolution reported it).
    typed: OptionValue | None
    source: Source
    origin: str | None = None  # e.g. "OPTION_TENSOR_PARALLEL_DEGREE", "--tp", "serving.properties:12"
    given: str | None = None  # what the user wrote, when an alias replaced it (engine=MPI -> Python)


class TypedReader:
    """Typed reads of resolved options. Resolution parsed each value once, by its table entry, and
    reported every value that does not parse; these readers only look the value up and check that
    its type is the one the reader expects."""

    def value(self, key: str) -> OptionValue | None:
        """The typed value of ``key``; None when it is unset, empty, or did not parse."""
        raise NotImplementedError

    def int_value(self, key: str) -> int | None:
        return _typed_as(key, self.value(key), int, bool)

    def float_value(self, key: str) -> float | None:
        return _typed_as(key, self.value(key), float)

    def bool_value(self, key: str) -> bool | None:
        return _typed_as(key, self.value(key), bool)

    def text_value(self, key: str) -> str | None:
        """A str or enum option (or the "max" of an int_or_max one)."""
        return _typed_as(key, self.value(key), str)


def _typed_as(key: str, value: OptionValue | None, kind: type[_T], *not_kinds: type) -> _T | None:
    """``value`` when it is a ``kind``: a mismatch means the reader and the option table disagree
    about the key's type, a bug in lmi-build rather than a user error."""
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, not_kinds):
        raise TypeError(f"{_full_key(key)} holds {type(value).__name__} {value!r}, not {kind.__name__}: "
                        "the reader and the option table disagree about its type")
    return value


class ResolvedOptions(TypedReader, FrozenModel):
    """An ordered mapping of serving.properties key -> ResolvedValue."""

    values: dict[str, ResolvedValue] = {}

    def get(self, key: str, default: str | None = None) -> str | None:
        item = self.values.get(_full_key(key))
        return item.value if item is not None else default

    def value(self, key: str) -> OptionValue | None:
        item = self.values.get(_full_key(key))
        return item.typed if item is not None and item.value != "" else None

    def source_of(self, key: str) -> Source | None:
        item = self.values.get(_full_key(key))
        return item.source if item is not None else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _full_key(key) in self.values

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.values)

    def with_values(self, updates: Mapping[str, ResolvedValue]) -> "ResolvedOptions":
        merged = dict(self.values)
        merged.update({_full_key(k): v for k, v in updates.items()})
        return ResolvedOptions(values=merged)


# Keys that are not under "option." in serving.properties.
TOP_LEVEL_KEYS = frozenset({"engine", "job_queue_size", "batch_size", "max_dynamic_batch_size", "max_batch_delay", "max_idle_time",
                            "minWorkers", "maxWorkers", "gpu.minWorkers", "gpu.maxWorkers",
                            "cpu.minWorkers", "cpu.maxWorkers", "load_on_devices", "log_model_metric",
                            "metrics_aggregation", "required_memory_mb", "reserved_memory_mb"})


def _full_key(key: str) -> str:
    """Accept "tensor_parallel_degree" as well as "option.tensor_parallel_degree"."""
    if key in TOP_LEVEL_KEYS or key.startswith("option.") or "." in key:
        return key
    return f"option.{key}"
