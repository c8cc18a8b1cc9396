"""The LMI option table (``lmi_build/data/options.toml``) as validated pydantic models.

The table is the one place option facts live: types, defaults per target, choices, bounds,
deprecations, aliases, and whether an option changes what is compiled (the cache key).
Every entry is checked when the table loads, so a malformed entry fails at import of the table,
not when a user happens to set that option.
"""

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from lmi_build.core.tables import DATA_DIR, read_table
from lmi_build.core.target_names import TargetName
from lmi_build.core.types import Record
from lmi_build.options.booleans import SPELLING as BOOL_SPELLING
from lmi_build.options.booleans import bool_text, parse_bool
from lmi_build.options.resolved import TOP_LEVEL_KEYS, OptionValue

OptionType = Literal["str", "int", "float", "bool", "enum", "int_list", "int_or_max"]
# "lmi-build": a build-time knob of this tool only; never written to the artifact's serving.properties.
EngineFamily = Literal["common", "server", "deepspeed", "accelerate", "lmi-dist", "vllm", "tnx", "trtllm", "lmi-build"]

TABLE_PATH = DATA_DIR / "options.toml"


class KeyDeprecation(Record):
    """A deprecated key. With a ``replacement``, its value is carried over to that key
    (through ``values`` when the value changes, e.g. load_in_8bit=true -> quantize=bitsandbytes8)."""

    since: str | None = None
    replacement: str | None = None
    values: dict[str, str] = {}  # old value -> replacement value; a value not listed is dropped
    targets: tuple[TargetName, ...] = ()  # where it is deprecated; () = everywhere
    note: str | None = None

    def applies_to(self, target: str) -> bool:
        return not self.targets or target in self.targets


class ValueDeprecation(Record):
    since: str | None = None
    replacement: str | None = None  # the value to use instead, carried over
    note: str | None = None


class Alias(Record):
    """``key=value`` stands for several settings (``engine=MPI`` = Python + mpi_mode + entryPoint)."""

    key: str
    value: str
    sets: dict[str, str]


class OptionSpec(Record):
    key: str
    type: OptionType
    description: str = Field(min_length=1)
    default: str | None = None
    target_defaults: dict[TargetName, str] = {}
    derived_default: str | None = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    targets: tuple[TargetName, ...] = ()
    engines: tuple[EngineFamily, ...] = Field(min_length=1)
    restricted: bool = False
    build_relevant: bool | tuple[TargetName, ...] = False
    # Targets on which the key only steers lmi-build's own build: never written to serving.properties
    # there (no container of that target reads it). `engines = ["lmi-build"]` is that on every target.
    build_only: tuple[TargetName, ...] = ()
    active_when: dict[str, tuple[str, ...]] = {}
    deprecated: KeyDeprecation | None = None
    deprecated_values: dict[str, ValueDeprecation] = {}
    # An enum the container lower-cases before it validates (the citation in options.toml): any case
    # is its choice; every other enum is case-sensitive, as the container's.
    folds_case: bool = False

    @model_validator(mode="after")
    def _well_formed(self) -> "OptionSpec":
        if self.key != self.key.strip() or not self.key:
            raise ValueError(f"bad key {self.key!r}")
        if not self.key.startswith("option.") and self.key not in TOP_LEVEL_KEYS:
            raise ValueError(f"{self.key}: a key without 'option.' must be listed in resolved.TOP_LEVEL_KEYS")
        if (self.type == "enum") != bool(self.choices):
            raise ValueError(f"{self.key}: choices are required for enum options and only for them")
        if self.default is not None and self.derived_default is not None:
            raise ValueError(f"{self.key}: give either default or derived_default")
        for label, value in [("default", self.default), *self.target_defaults.items()]:
            if value is not None and (problem := self.problem(value)) is not None:
                raise ValueError(f"{self.key}: {label} {value!r}: {problem}")
        for value, deprecation in self.deprecated_values.items():
            if value not in self.choices:
                raise ValueError(f"{self.key}: deprecated value {value!r} is not among the choices")
            if deprecation.replacement is not None and deprecation.replacement not in self.choices:
                raise ValueError(f"{self.key}: replacement {deprecation.replacement!r} is not a choice")
        if self.deprecated is not None and self.deprecated.values and self.type != "bool":
            raise ValueError(f"{self.key}: deprecated.values maps bool options only")
        return self

    # ------------------------------------------------------------------ queries
    @property
    def is_top_level(self) -> bool:
        return not self.key.startswith("option.")

    def applies_to(self, target: str) -> bool:
        return target in self.targets

    def default_for(self, target: str) -> str | None:
        return self.target_defaults.get(target, self.default)  # type: ignore[call-overload]

    def is_build_relevant(self, target: str) -> bool:
        if isinstance(self.build_relevant, bool):
            return self.build_relevant
        return target in self.build_relevant

    def is_build_only(self, target: str) -> bool:
        """Whether the key is a build-time knob on ``target``, kept out of its serving.properties."""
        return self.engines == ("lmi-build",) or target in self.build_only

    def is_active(self, values: Mapping[str, str]) -> bool:
        return all(values.get(key) in allowed for key, allowed in self.active_when.items())

    # ------------------------------------------------------------------ values
    def expected(self) -> str:
        """What a valid value looks like, for messages."""
        if self.type == "enum":
            return "one of: " + ", ".join(self.choices)
        return _EXPECTED[self.type]

    def problem(self, value: str) -> str | None:
        """Why ``value`` is invalid for this option, or None when it is valid."""
        return self.read(value)[1]

    def read(self, value: str) -> tuple[OptionValue | None, str | None]:
        """``(typed value, None)`` for a valid ``value``, ``(None, why not)`` otherwise.

        The one parser of option text: resolution types every value with it, once, and every
        reader downstream gets the typed value ("max" stays a string for int_or_max)."""
        return _READERS[self.type](self, value)

    def _read_enum(self, value: str) -> tuple[OptionValue | None, str | None]:
        if value in self.choices:
            return value, None
        text = value.strip().lower()
        folded = {choice.lower(): choice for choice in self.choices}
        if self.folds_case and text in folded:
            return folded[text], None
        if text in folded:
            return None, f"expected {folded[text]} (values are case-sensitive)"
        return None, f"expected {self.expected()}"

    def _read_bool(self, value: str) -> tuple[OptionValue | None, str | None]:
        flag = parse_bool(value.strip())
        return (flag, None) if flag is not None else (None, f"expected {self.expected()}")

    def _read_int_list(self, value: str) -> tuple[OptionValue | None, str | None]:
        text = value.strip()
        items = [item.strip() for item in text.split(",")]
        if not text or not all(_is_int(item) and int(item) > 0 for item in items):
            return None, f"expected {self.expected()}"
        if any(int(item) > JAVA_INT_MAX for item in items):
            return None, f"each value must be at most {JAVA_INT_MAX} (DJL reads it as a Java int)"
        return tuple(int(item) for item in items), None

    def _read_int(self, value: str) -> tuple[OptionValue | None, str | None]:
        """An int, or an int_or_max: a positive integer, -1 or "max"."""
        text = value.strip()
        if self.type == "int_or_max" and text == "max":
            return text, None
        if not _is_int(text):
            return None, f"expected {self.expected()}"
        number = int(text)
        if abs(number) > JAVA_INT_MAX:
            return None, f"must be at most {JAVA_INT_MAX} (DJL reads it as a Java int)"
        if self.type == "int_or_max" and not (number >= 1 or number == -1):
            return None, "expected a positive integer, -1 (all devices) or \"max\""
        return self._within_bounds(number)

    def _read_float(self, value: str) -> tuple[OptionValue | None, str | None]:
        try:
            number = float(value.strip())
        except ValueError:
            return None, f"expected {self.expected()}"
        if number != number or number in (float("inf"), float("-inf")):
            return None, f"expected {self.expected()}"
        return self._within_bounds(number)

    def _within_bounds(self, number: float) -> tuple[OptionValue | None, str | None]:
        if self.minimum is not None:
            if self.exclusive_minimum and number <= self.minimum:
                return None, f"must be greater than {_show(self.minimum)}"
            if not self.exclusive_minimum and number < self.minimum:
                return None, f"must be at least {_show(self.minimum)}"
        if self.maximum is not None and number > self.maximum:
            return None, f"must be at most {_show(self.maximum)}"
        return number, None

    def parse(self, value: str) -> OptionValue:
        """The typed value of a valid ``value``; ``ValueError`` names the problem otherwise."""
        typed, problem = self.read(value)
        if problem is not None or typed is None:
            raise ValueError(f"{self.key}={shown_value(value)}: {problem}")
        return typed

    def normalize(self, value: str) -> str:
        """The canonical spelling of a valid value: stripped, booleans lower-case.

        Java's ``Boolean.parseBoolean`` and DJL's Python side both read ``true``/``false``
        (see ``booleans``); a canonical spelling keeps equal settings equal in the cache key."""
        if self.type == "str":
            return value
        text = value.strip()
        if self.type == "bool":
            flag = parse_bool(text)
            return bool_text(flag) if flag is not None else text.lower()
        if self.type == "int_list":
            return ",".join(item.strip() for item in text.split(","))
        return text


# The reader of each option type's text (OptionSpec.read).
_READERS: dict[OptionType, Callable[[OptionSpec, str], tuple[OptionValue | None, str | None]]] = {
    "str": lambda spec, value: (value, None), "enum": OptionSpec._read_enum, "bool": OptionSpec._read_bool,
    "int_list": OptionSpec._read_int_list, "int": OptionSpec._read_int, "int_or_max": OptionSpec._read_int,
    "float": OptionSpec._read_float,
}

_EXPECTED: dict[str, str] = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": BOOL_SPELLING,
    "int_list": "positive integers separated by commas (e.g. 256,512,1024)",
    "int_or_max": 'an integer or "max"',
}


# DJL parses integer options with Integer.parseInt / Python int and hands them to Java ints.
JAVA_INT_MAX = 2**31 - 1
# An integer option longer than this is no number DJL accepts (and int() of 5,000 digits raises).
_MAX_INT_CHARS = 20


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isascii() and body.isdigit() and len(body) <= _MAX_INT_CHARS


# A value quoted in a message is cut here: the message stays one readable line.
SHOWN_VALUE_CHARS = 64


def shown_value(value: str) -> str:
    """``value`` as a message quotes it: at most SHOWN_VALUE_CHARS characters, cut with an ellipsis."""
    return value if len(value) <= SHOWN_VALUE_CHARS else value[: SHOWN_VALUE_CHARS - 1] + "…"


def _show(number: float) -> str:
    return str(int(number)) if number == int(number) else str(number)


class OptionTable(Record):
    option: tuple[OptionSpec, ...]
    alias: tuple[Alias, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> "OptionTable":
        seen: set[str] = set()
        for spec in self.option:
            if spec.key in seen:
                raise ValueError(f"duplicate option key {spec.key}")
            seen.add(spec.key)
        for spec in self.option:
            for key in spec.active_when:
                if key not in seen:
                    raise ValueError(f"{spec.key}: active_when names unknown key {key}")
            if spec.deprecated and spec.deprecated.replacement and spec.deprecated.replacement not in seen:
                raise ValueError(f"{spec.key}: replacement {spec.deprecated.replacement} is not in the table")
        for alias in self.alias:
            for key in alias.sets:
                if key not in seen:
                    raise ValueError(f"alias {alias.key}={alias.value} sets unknown key {key}")
        return self

    def by_key(self) -> dict[str, OptionSpec]:
        return {spec.key: spec for spec in self.option}


def load_table(path: Path = TABLE_PATH) -> OptionTable:
    """Read and validate an option table file (a one-line ``TableError`` names the file and entry)."""
    return read_table(path, OptionTable)


@lru_cache(maxsize=1)
def _table() -> OptionTable:
    return load_table()


@lru_cache(maxsize=1)
def _index() -> dict[str, OptionSpec]:
    return _table().by_key()


@lru_cache(maxsize=1)
def _folded_index() -> dict[str, OptionSpec]:
    return {key.lower(): spec for key, spec in _index().items()}


def full_key(key: str) -> str:
    """``tensor_parallel_degree`` -> ``option.tensor_parallel_degree``; ``engine`` stays ``engine``."""
    key = key.strip()
    if key in TOP_LEVEL_KEYS or key.startswith("option.") or "." in key:
        return key
    return f"option.{key}"


def option_spec(key: str) -> OptionSpec | None:
    """The table entry of ``key`` ("tensor_parallel_degree" or "option.tensor_parallel_degree")."""
    return _index().get(full_key(key))


def exact_spec(key: str) -> OptionSpec | None:
    """The table entry of exactly ``key`` as written in serving.properties (no prefix added)."""
    return _index().get(key)


def canonical_key(key: str) -> str:
    """The table's spelling of a key written in another case (``option.entrypoint`` ->
    ``option.entryPoint``); unknown keys are returned unchanged."""
    spec = _folded_index().get(key.lower())
    return spec.key if spec is not None else key


def all_option_specs() -> Sequence[OptionSpec]:
    return _table().option


def aliases() -> Sequence[Alias]:
    return _table().alias


def alias_for(key: str, value: str) -> Alias | None:
    return next((a for a in _table().alias if a.key == key and a.value == value), None)
