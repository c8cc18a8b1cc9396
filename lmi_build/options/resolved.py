"""Resolved LMI options: every value with the input it came from.

This is the contract between option resolution (CLI > serving.properties > env > default) and
everything downstream (planner, serving.properties writer, manifest).
"""

from collections.abc import Iterator, Mapping
from enum import Enum

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
    """Typed values of resolved options by key: resolution parsed each value once, by its table entry, and
    reported every value that does not parse. Read through an options model (``planning.context.read_options``),
    whose strict fields refuse a value of another type than the table's: a reader and the table disagreeing
    is a bug said loudly, not a value parsed again."""

    def value(self, key: str) -> OptionValue | None:
        """The typed value of ``key``; None when it is unset, empty, or did not parse."""
        raise NotImplementedError


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
