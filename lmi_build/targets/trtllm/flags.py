"""Per-release flag knowledge of the TensorRT-LLM tools, read from ``data/flags.toml``.

A ``FlagTable`` answers, for one TensorRT-LLM version and one tool ("trtllm_build",
"convert_checkpoint", "quantize", "legacy_build", "hf_convert"): does this flag exist, which value
form does it take, and what happened to it if it was removed. ``validate_argv`` checks a whole
argv against the table (used by the step generator and by the test stand-in).
"""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion
from pydantic import field_validator, model_validator

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.tables import load_table
from lmi_build.core.types import FrozenModel, Record
from lmi_build.core.versions import parse_version, release

FlagKind = Literal["value", "int", "float", "store_true", "enable_disable", "dtype", "pair"]
Tool = Literal["trtllm_build", "convert_checkpoint", "quantize", "legacy_build", "hf_convert"]
TOOLS: tuple[Tool, ...] = ("trtllm_build", "convert_checkpoint", "quantize", "legacy_build", "hf_convert")
DTYPE_VALUES = ("float16", "bfloat16", "float32", "disable", "auto")
FLAGS_FILE = Path(__file__).with_name("data") / "flags.toml"


class FlagError(LmiBuildError):
    """An argv uses a flag the TensorRT-LLM version does not have, or a value of the wrong form."""

    code = "flag"


class RemovalNote(Record):
    """What happened to a flag a series no longer has (``[series."X".removed]``)."""

    kind: Literal["runtime", "error"]
    message: str


class Removal(RemovalNote):
    """A removed flag in a resolved table, with the series that removed it."""

    since: str


class Limits(Record):
    """Constraints the version's tools assert on their values (``[series."X".limits]``); unset: none known."""

    # examples/<model>/build.py asserts tokens_per_block >= this whenever --enable_context_fmha is set.
    context_fmha_min_tokens_per_block: int | None = None
    # The storage types hf_llama_convert.py (legacy SmoothQuant) accepts.
    hf_convert_storage_types: tuple[str, ...] | None = None
    # convert_checkpoint.py reads a pre-quantized AutoAWQ model's quantization_config itself (quant_method
    # awq -> W4A16_GPTQ with use_autoawq): AutoAWQ inputs convert, with no flag naming them.
    awq_from_quantization_config: bool | None = None
    # Recipe examples whose convert_checkpoint.py asserts pp_size == 1 (no pipeline parallelism).
    single_pp_examples: tuple[str, ...] | None = None
    # Recipe examples whose convert_checkpoint.py takes no --tp_size/--pp_size/--workers (it writes a
    # one-rank checkpoint): the step passes none of them and a plan with tp or pp > 1 is refused.
    single_rank_examples: tuple[str, ...] | None = None
    # Recipe examples whose convert_checkpoint.py at this release was not read: their flags are unknown,
    # so their converter route is refused rather than generated from another release's flags.
    unread_converters: tuple[str, ...] | None = None
    # Recipe example -> convert_checkpoint flags (of this table's shared convert_checkpoint list) that
    # its own converter lacks, or parses without acting on, at this release: a step needing one is refused.
    converter_lacks: dict[str, tuple[str, ...]] | None = None
    # The values a "dtype" flag's argparse choices allow at this release (plugin dtypes); unset: DTYPE_VALUES.
    plugin_dtypes: tuple[str, ...] | None = None

    def merged(self, newer: "Limits") -> "Limits":
        return Limits(**{**self.model_dump(), **newer.model_dump(exclude_unset=True)})


class Variant(Record):
    """The flag of one example's convert_checkpoint.py that takes a recipe's version option
    (``[series."X".variants.<example>]``): ``option`` (e.g. ``gpt_model_version``) is passed as
    ``--<flag>``, its value through ``values`` (LMI value -> converter value; one not listed as is)."""

    option: str
    flag: str
    values: dict[str, str] = {}

    def value(self, lmi_value: str) -> str:
        return self.values.get(lmi_value, lmi_value)


class Spelling(Record):
    """How one example's convert_checkpoint.py spells the arguments every conversion passes, where it
    differs from ``--model_dir --output_dir --tp_size --pp_size --workers`` (``[series."X".spellings.<example>]``):
    an empty name (``None`` here) is a flag the converter does not take (a plan that needs it, pp > 1, is
    refused); ``fixed`` flags are always passed (Gemma's ``--ckpt-type hf``)."""

    model_dir: str = "model_dir"
    output_dir: str = "output_dir"
    tp_size: str | None = "tp_size"
    pp_size: str | None = "pp_size"
    workers: str | None = "workers"
    fixed: dict[str, str] = {}

    @field_validator("tp_size", "pp_size", "workers")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class FlagTable(FrozenModel):
    series: str
    tools: dict[str, dict[str, FlagKind]]
    removed: dict[str, Removal]
    sources: tuple[str, ...]
    # Recipe example name -> its directory under the checkout's examples/ (moves between releases).
    examples: dict[str, str] = {}
    # Recipe example name -> the converter flag that takes its version option (absent: none is passed).
    variants: dict[str, Variant] = {}
    # Recipe example name -> how its converter spells the common arguments (absent: the usual names).
    spellings: dict[str, Spelling] = {}
    limits: Limits = Limits()

    def spelling(self, example: str) -> Spelling:
        return self.spellings.get(example, Spelling())

    def example_dir(self, example: str) -> str:
        """Where ``examples/<example>`` lives in this version (e.g. ``models/core/llama`` from 0.19)."""
        return self.examples.get(example, example)

    def has(self, tool: Tool, flag: str) -> bool:
        return flag in self.tools.get(tool, {})

    def kind(self, tool: Tool, flag: str) -> FlagKind:
        try:
            return self.tools[tool][flag]
        except KeyError:
            raise FlagError(f"--{flag} is not a {tool} flag of TensorRT-LLM {self.series}",
                            hint=self.removed[flag].message if flag in self.removed else
                            "see lmi_build/targets/trtllm/data/flags.toml") from None

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
            problem = _value_problem(kind, values, self.limits.plugin_dtypes or DTYPE_VALUES)
            if problem:
                problems.append(f"--{flag}: {problem}")
        return problems


def _value_problem(kind: FlagKind, values: list[str], dtypes: tuple[str, ...] = DTYPE_VALUES) -> str | None:
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
    if kind == "dtype" and values[0] not in dtypes:
        return f"'{values[0]}' must be one of {', '.join(dtypes)}"
    return None


class Series(Record):
    """One ``[series."X"]`` of flags.toml: the flags of each tool from release ``min`` on."""

    min: str
    inherit: str | None = None
    sources: tuple[str, ...] = ()
    remove: dict[Tool, tuple[str, ...]] = {}
    removed: dict[str, RemovalNote] = {}
    examples: dict[str, str] = {}
    variants: dict[str, Variant] = {}
    spellings: dict[str, Spelling] = {}
    limits: Limits = Limits()
    trtllm_build: dict[str, FlagKind] = {}
    convert_checkpoint: dict[str, FlagKind] = {}
    quantize: dict[str, FlagKind] = {}
    legacy_build: dict[str, FlagKind] = {}
    hf_convert: dict[str, FlagKind] = {}

    @field_validator("min")
    @classmethod
    def _release_number(cls, value: str) -> str:
        parse_version(value)
        return value

    def flags(self, tool: Tool) -> dict[str, FlagKind]:
        flags: dict[str, FlagKind] = getattr(self, tool)
        return flags


class FlagsFile(Record):
    """The whole of flags.toml."""

    series: dict[str, Series]

    @model_validator(mode="after")
    def _inherits_an_older_series(self) -> "FlagsFile":
        for name, entry in self.series.items():
            parent = self.series.get(entry.inherit) if entry.inherit is not None else None
            if entry.inherit is not None and parent is None:
                raise ValueError(f"series {name} inherits unknown series {entry.inherit}")
            if parent is not None and release(parent.min) >= release(entry.min):
                raise ValueError(f"series {name} inherits {entry.inherit}, which is not older")
        return self

    def names(self) -> list[str]:
        """Series names, oldest first."""
        return sorted(self.series, key=lambda name: parse_version(self.series[name].min))

    def series_for(self, version: str) -> str:
        """The series covering ``version``. Compared by release number, so ``0.21.0rc1`` falls in
        a series starting at ``0.21.0``: a release candidate already ships its release's tools."""
        try:
            wanted = release(version)
        except InvalidVersion:
            raise FlagError(f"'{version}' is not a TensorRT-LLM version",
                            hint="use a PEP 440 version such as 0.12.0 or 0.21.0rc1") from None
        chosen: str | None = None
        for name in self.names():
            if release(self.series[name].min) <= wanted:
                chosen = name
        if chosen is None:
            raise FlagError(f"TensorRT-LLM {version} predates every known flag series",
                            hint=f"known series: {', '.join(self.names())}")
        return chosen

    def table(self, name: str) -> FlagTable:
        """The flags of series ``name``: its parent's, minus ``remove``, plus its own."""
        entry = self.series[name]
        if entry.inherit is not None:
            base = self.table(entry.inherit)
            tools = {tool: dict(flags) for tool, flags in base.tools.items()}
            removed = dict(base.removed)
            sources = list(base.sources)
            examples = {**base.examples, **entry.examples}
            variants = {**base.variants, **entry.variants}
            spellings = {**base.spellings, **entry.spellings}
            limits = base.limits.merged(entry.limits)
        else:  # a root series
            tools, removed, sources = {}, {}, []
            examples, variants, limits = dict(entry.examples), dict(entry.variants), entry.limits
            spellings = dict(entry.spellings)
        for tool, gone in entry.remove.items():
            for flag in gone:
                tools.get(tool, {}).pop(flag, None)
        for tool in TOOLS:
            tools.setdefault(tool, {}).update(entry.flags(tool))
        for flag, note in entry.removed.items():
            removed[flag] = Removal(since=name, kind=note.kind, message=note.message)
        sources.extend(entry.sources)
        return FlagTable(series=name, tools={t: f for t, f in tools.items() if f}, removed=removed,
                         sources=tuple(sources), examples=examples, variants=variants,
                         spellings=spellings, limits=limits)


def flags_file() -> FlagsFile:
    return load_table(FLAGS_FILE, FlagsFile)


def series_for(version: str) -> str:
    """The flag series that covers a TensorRT-LLM version (``"0.21.0rc1"`` -> ``"0.16"``)."""
    return flags_file().series_for(version)


@lru_cache(maxsize=32)
def _table_for_series(name: str) -> FlagTable:
    return flags_file().table(name)


def flag_table(version: str) -> FlagTable:
    """The flags of every TensorRT-LLM tool in ``version``."""
    return _table_for_series(series_for(version))
