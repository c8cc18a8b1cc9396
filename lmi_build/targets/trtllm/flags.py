"""Per-release flag knowledge of the TensorRT-LLM tools, read from ``data/flags.toml``.

A ``FlagTable`` answers, for one TensorRT-LLM version and one tool ("trtllm_build",
"convert_checkpoint", "quantize", "legacy_build", "hf_convert"): does this flag exist, which value
form does it take, and what happened to it if it was removed. ``validate_argv`` checks a whole
argv against the table (used by the step generator and by the test stand-in).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from lmi_build.errors import LmiBuildError
from lmi_build.targets.trtllm.profiles import version_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FlagKind = Literal["value", "int", "float", "store_true", "enable_disable", "dtype", "pair"]
Tool = Literal["trtllm_build", "convert_checkpoint", "quantize", "legacy_build", "hf_convert"]
TOOLS: tuple[Tool, ...] = ("trtllm_build", "convert_checkpoint", "quantize", "legacy_build", "hf_convert")
DTYPE_VALUES = ("float16", "bfloat16", "float32", "disable", "auto")
FLAGS_FILE = Path(__file__).with_name("data") / "flags.toml"


class FlagError(LmiBuildError):
    """An argv uses a flag the TensorRT-LLM version does not have, or a value of the wrong form."""

    code = "flag"


class Removal(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["runtime", "error"]
    message: str
    since: str


class FlagTable(BaseModel):
    model_config = ConfigDict(frozen=True)

    series: str
    tools: dict[str, dict[str, FlagKind]]
    removed: dict[str, Removal]
    sources: tuple[str, ...]

    def has(self, tool: Tool, flag: str) -> bool:
        return flag in self.tools.get(tool, {})

    def kind(self, tool: Tool, flag: str) -> FlagKind:
        try:
            return self.tools[tool][flag]
        except KeyError:
            raise FlagError(f"--{flag} is not a {tool} flag of TensorRT-LLM {self.series}",
                            hint=self.removed[flag].message if flag in self.removed else
                            "see lmi_build/trtllm/data/flags.toml") from None

    def validate_argv(self, tool: Tool, argv: list[str]) -> list[str]:
        """Problems of ``argv`` (flags only, program name excluded) for this version; empty when valid."""
        problems: list[str] = []
        known = self.tools.get(tool, {})
        index = 0
        while index < len(argv):
            token = argv[index]
            index += 1
            if not token.startswith("-"):
                problems.append(f"unexpected positional argument '{token}'")
                continue
            flag = token.lstrip("-")
            if flag not in known:
                why = self.removed[flag].message if flag in self.removed else "unknown flag"
                problems.append(f"--{flag}: not in {tool} of TensorRT-LLM {self.series} ({why})")
                continue
            kind = known[flag]
            needed = 0 if kind == "store_true" else 2 if kind == "pair" else 1
            values = argv[index:index + needed]
            index += needed
            if len(values) < needed or any(v.startswith("--") for v in values):
                problems.append(f"--{flag}: expects {needed} value(s)")
                continue
            problem = _value_problem(kind, values)
            if problem:
                problems.append(f"--{flag}: {problem}")
        return problems


def _value_problem(kind: FlagKind, values: list[str]) -> str | None:
    if any(v.startswith("{") and v.endswith("}") for v in values):
        return None  # a step placeholder ({workers}), bound by the runner
    if kind == "int":
        return None if values[0].lstrip("-").isdigit() else f"'{values[0]}' is not an integer"
    if kind == "float":
        try:
            float(values[0])
        except ValueError:
            return f"'{values[0]}' is not a number"
        return None
    if kind == "enable_disable" and values[0] not in ("enable", "disable"):
        return f"'{values[0]}' must be enable or disable"
    if kind == "dtype" and values[0] not in DTYPE_VALUES:
        return f"'{values[0]}' must be one of {', '.join(DTYPE_VALUES)}"
    return None


@lru_cache(maxsize=1)
def _raw_series() -> dict[str, dict[str, Any]]:
    data = tomllib.loads(FLAGS_FILE.read_text(encoding="utf-8"))
    series: dict[str, dict[str, Any]] = data["series"]
    return series


def series_names() -> list[str]:
    raw = _raw_series()
    return sorted(raw, key=lambda name: version_key(str(raw[name]["min"])))


def series_for(version: str) -> str:
    """The flag series that covers a TensorRT-LLM version (``"0.21.0rc1"`` -> ``"0.16"``)."""
    wanted = version_key(version)
    raw = _raw_series()
    chosen: str | None = None
    for name in series_names():
        if version_key(str(raw[name]["min"])) <= wanted:
            chosen = name
    if chosen is None:
        raise FlagError(f"TensorRT-LLM {version} predates every known flag series",
                        hint=f"known series: {', '.join(series_names())}")
    return chosen


@lru_cache(maxsize=32)
def _table_for_series(name: str) -> FlagTable:
    raw = _raw_series()[name]
    parent = raw.get("inherit")
    if parent is not None:
        base = _table_for_series(str(parent))
        tools = {tool: dict(flags) for tool, flags in base.tools.items()}
        removed = dict(base.removed)
        sources = list(base.sources)
    else:
        tools, removed, sources = {}, {}, []  # a root series
    for tool, gone in raw.get("remove", {}).items():
        for flag in gone:
            tools.get(tool, {}).pop(flag, None)
    for tool in TOOLS:
        tools.setdefault(tool, {}).update(raw.get(tool, {}))
    for flag, info in raw.get("removed", {}).items():
        removed[flag] = Removal(since=name, **info)
    sources.extend(raw.get("sources", []))
    return FlagTable(series=name, tools={t: f for t, f in tools.items() if f}, removed=removed,
                     sources=tuple(sources))


def flag_table(version: str) -> FlagTable:
    """The flags of every TensorRT-LLM tool in ``version``."""
    return _table_for_series(series_for(version))
