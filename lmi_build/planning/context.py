"""What a target's planning step reads and writes: the model, its recipe, the resolved options,
the instance, the quantization plan, and the findings every check appends to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import BaseModel

from lmi_build.core.types import TargetName
from lmi_build.model.spec import ModelSpec
from lmi_build.options.booleans import bool_text
from lmi_build.options.resolve import resolved_value
from lmi_build.options.resolved import (
    OptionValue,
    ResolvedOptions,
    ResolvedValue,
    Source,
    TypedReader,
    _full_key,
)
from lmi_build.options.spec import exact_spec
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import InstanceType
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.planning.request import PlanRequest
from lmi_build.recipes.schema import Recipe, TargetSupport

# User values that ask the planner to resolve them (tp=max): replacing them is no rewrite.
RESOLVED_PLACEHOLDERS = frozenset({"max", "auto"})


# Keys the written serving.properties never carries (they point at the build's inputs).
NOT_WRITTEN = frozenset({"option.model_id", "option.save_mp_checkpoint_path", "model_dir",
                         "upload_checkpoints_s3url", "properties_dir"})


Typed = TypeVar("Typed", bound=BaseModel)


def read_options(options: TypedReader, kind: type[Typed]) -> Typed:
    """The options ``kind`` names, typed: a target's model whose fields are option keys (``option.<field>``, or
    the field's alias), typed as the option table parses them (strict: a reader and the table disagreeing is
    a bug). The one place a target's options are read by key; None: unset (or unparsable: already an error)."""
    return kind.model_validate({key: options.value(key) for key in _keys(kind)})


def read_written(properties: Mapping[str, str], kind: type[Typed]) -> Typed:
    """``read_options`` of serving.properties text (full keys: an artifact's, a saved plan's), typed as resolution
    types it. Leniently: the file may come from another release or a user's editor, so a key no field names is
    not read, and a missing one, or one whose value does not parse, is None."""
    return read_options(_WrittenText(properties), kind)


class _WrittenText(TypedReader):
    """serving.properties text typed by the option table; a value that does not parse reads as unset."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        self.properties = properties

    def value(self, key: str) -> OptionValue | None:
        key = _full_key(key)
        text, spec = self.properties.get(key, ""), exact_spec(key)
        return spec.read(text)[0] if spec is not None and text.strip() else None


def read_text(properties: Mapping[str, str], kind: type[Typed]) -> OptionText[Typed]:
    """The serving.properties text (full keys) of the keys ``kind`` names (a target's options model, as in
    ``read_options``), as written: what a container reads before typing it its own way; None: absent."""
    return OptionText(kind, {name: properties.get(_full_key(key)) for name, key in _named_keys(kind)})


class OptionText(Generic[Typed]):
    """The text of the options an options model names, read by its field names (``text.rolling_batch``):
    a release's start-up types serving.properties its own way (DJL's Java and Python parse "True", " 8 "
    or "max" otherwise than the option table does), so its model reads the text as written. The model's
    fields are the only names: another name is an AttributeError at once, not a silent None (a typed
    view per model would declare every key a second time)."""

    __slots__ = ("_kind", "_texts")

    def __init__(self, kind: type[Typed], texts: Mapping[str, str | None]) -> None:
        self._kind = kind
        self._texts = dict(texts)

    def __getattr__(self, name: str) -> str | None:
        texts: dict[str, str | None] = object.__getattribute__(self, "_texts")
        if name not in texts:
            kind: type[BaseModel] = object.__getattribute__(self, "_kind")
            raise AttributeError(f"{kind.__name__} has no option {name!r}")
        return texts[name]


def written_text(values: BaseModel) -> dict[str, str]:
    """The serving.properties text of the values ``values`` sets (a target's model whose fields are option keys,
    as in ``read_options``), in field order; None: not written. The one way a target writes keys by name."""
    return {_full_key(key): _text(value) for key, value in values.model_dump(by_alias=True, exclude_none=True).items()}


def handler_options(properties: Mapping[str, str]) -> dict[str, str]:
    """The set ``option.*`` keys of serving.properties text as DJL's Python handlers receive them: without the
    prefix, as its properties managers name their fields."""
    return {key.removeprefix("option."): value for key, value in properties.items()
            if key.startswith("option.") and value != ""}


def _text(value: object) -> str:
    return bool_text(value) if isinstance(value, bool) else str(value)


def _keys(kind: type[BaseModel]) -> list[str]:
    """The option keys of ``kind``'s fields: each field's alias (``option.batch_size`` beside the top-level
    ``batch_size``), else its name."""
    return [key for _, key in _named_keys(kind)]


def _named_keys(kind: type[BaseModel]) -> list[tuple[str, str]]:
    """``kind``'s fields with their option keys (``_keys``)."""
    return [(name, field.alias or name) for name, field in kind.model_fields.items()]


@dataclass
class PlanContext(TypedReader):
    request: PlanRequest
    target: TargetName
    spec: ModelSpec
    recipe: Recipe
    support: TargetSupport
    options: ResolvedOptions
    instance: InstanceType | None
    quantization: QuantizationPlan
    findings: Findings = field(default_factory=Findings)
    # Architecture version options (baichuan_model_version, ...): given or inferred from config.json.
    version_options: dict[str, str] = field(default_factory=dict)
    # serving.properties values the target computes (engine, resolved tp, rolling_batch, ...).
    derived: dict[str, ResolvedValue] = field(default_factory=dict)
    # Keys the target keeps out of serving.properties (e.g. option.quantize for a checkpoint whose
    # config.json declares its quantization): full keys.
    withheld: set[str] = field(default_factory=set)
    # Keys whose user value a derived one replaced (warned once each: option_rewritten).
    rewritten: set[str] = field(default_factory=set)

    # -- reading options (the typed readers are TypedReader's) ---------------------------------
    def value(self, key: str) -> OptionValue | None:
        """The typed value of ``key``, a derived one first; None when unset, empty, or unparsed."""
        item = self._item(key)
        return item.typed if item is not None and item.value != "" else None

    def is_set(self, key: str) -> bool:
        """Whether ``key`` has a non-empty value, valid or not (for "set together" checks)."""
        item = self._item(key)
        return item is not None and item.value != ""

    def _item(self, key: str) -> ResolvedValue | None:
        full = _full_key(key)
        derived = self.derived.get(full)
        return derived if derived is not None else self.options.values.get(full)

    def text_options(self, kind: type[Typed]) -> OptionText[Typed]:
        """``read_text`` of the options as they stand, derived values applied; an empty value reads as absent."""
        items = {name: self._item(key) for name, key in _named_keys(kind)}
        return OptionText(kind, {name: item.value if item is not None and item.value != "" else None
                                 for name, item in items.items()})

    def source_of_field(self, kind: type[BaseModel], name: str) -> Source | None:
        """Where the option behind ``kind``'s field ``name`` came from (its key from the mapping)."""
        field = kind.model_fields[name]
        return self.options.source_of(field.alias or name)

    def user_set(self, key: str) -> bool:
        """True when the value came from the user (flag, properties, env), not a default."""
        return self.options.source_of(key) in (Source.CLI, Source.PROPERTIES, Source.ENV, Source.ALIAS)

    def user_options(self, kind: type[Typed]) -> Typed:
        """``read_options`` of only the options the user gave (flag, properties, env); the others None."""
        return kind.model_validate({key: self.options.value(key) for key in _keys(kind) if self.user_set(key)})

    def write_options(self, values: BaseModel, origin: str) -> None:
        """Derive each value ``values`` sets (a target's model whose fields are serving.properties keys,
        ``option.<field>`` or the field's alias), in field order; ``origin``: why."""
        for name, value in values.model_dump(by_alias=True, exclude_none=True).items():
            self.derive(name, value, origin)

    # -- writing options -------------------------------------------------------------------
    def written_options(self) -> dict[str, ResolvedValue]:
        """The options serving.properties will carry: resolved, derived values applied, without the
        withheld keys and those that point at the build's inputs."""
        final = self.options.with_values(self.derived).values
        return {key: item for key, item in final.items() if key not in NOT_WRITTEN and key not in self.withheld}

    def written_properties(self) -> tuple[dict[str, str], dict[str, str]]:
        """``written_options`` as the container's start-up model takes them: key -> value text, and
        key -> where the value came from (``Source`` value)."""
        written = self.written_options()
        return ({key: item.value for key, item in written.items()},
                {key: item.source.value for key, item in written.items()})

    def withhold(self, key: str) -> None:
        """Keep ``key`` out of serving.properties (the plan's options) whatever its source."""
        self.withheld.add(_full_key(key))

    def derive(self, key: str, value: object, origin: str) -> None:
        """Record a value the planner computed (it goes into serving.properties)."""
        full, text = _full_key(key), _text(value)
        current = self.options.values.get(full)
        derived = resolved_value(full, text, Source.DERIVED, origin)
        replaced = current is not None and current.typed is not None and self.user_set(full)
        if current is not None and replaced and full not in self.rewritten:
            # The user's value (or the alias's, e.g. engine=MPI made Python) is replaced: say so, with
            # both values and why; never silently. (A value that does not parse is not replaced but
            # refused: resolution made it a plan error, and "remove it to silence this" would be untrue.)
            given = current.given if current.given is not None else current.value
            same = given == text if current.given is not None else current.typed == derived.typed
            if not same and given.lower() not in RESOLVED_PLACEHOLDERS:
                self.rewritten.add(full)
                where = current.origin or current.source.value
                if current.given is not None and where.startswith(f"{full}={given} ("):
                    where = where[len(f"{full}={given} ("):-1]  # "engine=MPI (from serving.properties:1)"
                self.findings.warn(
                    "option_rewritten",
                    f"{full}={given} (from {where}) is rewritten to {full}={text}: {origin}",
                    hint=f"the plan writes {full}={text} into serving.properties; remove {full} from your "
                         "inputs to silence this")
        if current is not None and current.value == text:
            return
        self.derived[full] = derived

