"""Option resolution: every input layered in ONE documented order, every value with its source.

Precedence, first wins:

1. CLI: dedicated flags (``--tp``) and ``--option key=value``
2. the ``--properties`` serving.properties file
3. the environment (``OPTION_*``, ``HF_MODEL_ID``, ``TENSOR_PARALLEL_DEGREE``, TGI/SageMaker names)
4. alias expansion of an explicit ``engine`` (``engine=MPI`` -> Python + mpi_mode + entryPoint)
5. the recipe's defaults for the architecture and target
6. the option table's defaults for the target

The file beats the environment as in the container's Java side (env only fills absent keys).
Deprecated keys are carried over to their replacement inside their own layer, so a deprecated
key in the file still beats the replacement key in the environment. Unknown keys are kept (they
pass through to serving.properties) with a warning; ``strict=True`` turns every warning into an
error. Table defaults of architecture-restricted options are never applied: the recipe gives them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lmi_build.core.errors import OptionError
from lmi_build.core.redaction import is_secret_key, redact, secret_values
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.core.types import PlanMessage
from lmi_build.options.env import translate_env
from lmi_build.options.properties import read_properties_with_lines
from lmi_build.options.resolved import OptionValue, ResolvedOptions, ResolvedValue, Source
from lmi_build.options.spec import (
    OptionSpec,
    alias_for,
    all_option_specs,
    exact_spec,
    full_key,
    shown_value,
)
from lmi_build.options.spec import (
    option_spec as option_spec,
)

__all__ = [
    "GivenOptions",
    "OptionInputs",
    "OptionResolution",
    "all_option_specs",
    "cli_option_pairs",
    "given_options",
    "option_spec",
    "resolve_given",
    "resolve_options",
    "resolved_value",
    "written_options",
]

_EXPLICIT = (Source.CLI, Source.PROPERTIES, Source.ENV)
_TABLE_ORIGIN = "option table"


@dataclass(frozen=True)
class OptionInputs:
    cli: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # key -> (value, origin)
    properties_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # usually os.environ
    recipe_defaults: Mapping[str, str] = field(default_factory=dict)  # the recipe's, for this target


@dataclass(frozen=True)
class OptionResolution:
    options: ResolvedOptions
    errors: list[PlanMessage]
    warnings: list[PlanMessage]

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class _Candidate:
    key: str
    value: str
    source: Source
    origin: str
    given: str | None = None  # the user's own value, when an alias replaced it


@dataclass
class _Messages:
    secrets: list[str]
    errors: list[PlanMessage] = field(default_factory=list)
    warnings: list[PlanMessage] = field(default_factory=list)
    unknown: int = 0  # unknown keys seen so far

    def show(self, key: str, value: str) -> str:
        return shown_value(redact(key, value, self.secrets))

    def warn(self, code: str, message: str, hint: str | None = None) -> None:
        self.warnings.append(PlanMessage(code=code, message=message, hint=hint))

    def error(self, code: str, message: str, hint: str | None = None) -> None:
        self.errors.append(PlanMessage(code=code, message=message, hint=hint))


def cli_option_pairs(values: list[str]) -> dict[str, tuple[str, str]]:
    """Parse repeated ``--option key=value`` (short keys get the ``option.`` prefix)."""
    pairs: dict[str, tuple[str, str]] = {}
    for item in values:
        key, separator, value = item.partition("=")
        key = key.strip()
        if not separator or not key or any(char.isspace() for char in key):
            raise OptionError(
                f"--option {item!r}: expected key=value",
                hint="for example: --option tensor_parallel_degree=4",
            )
        key = full_key(key)
        pairs[key] = (value, f"--option {key.removeprefix('option.')}")
    return pairs


def resolved_value(key: str, text: str, source: Source, origin: str | None = None) -> ResolvedValue:
    """A value that needs no resolution (a planner-derived value, a saved plan's written text),
    typed by its table entry like every resolved one; a key the table does not know stays text.
    ``ValueError`` when ``text`` does not parse: such a value comes from code, not from a user."""
    key = full_key(key)
    spec = exact_spec(key)
    if spec is None:
        return ResolvedValue(key=key, value=text, typed=text, source=source, origin=origin)
    return ResolvedValue(key=key, value=spec.normalize(text), typed=spec.parse(text), source=source, origin=origin)


def written_options(values: Mapping[str, str], sources: Mapping[str, str] | None = None) -> ResolvedOptions:
    """A plan's written options (serving.properties text, as a saved plan holds them) typed again
    by their table entries, for the steps that run a plan. ``sources``: key -> Source value."""
    sources = sources or {}
    return ResolvedOptions(values={
        key: resolved_value(key, text, Source(sources.get(key, Source.DERIVED.value))) for key, text in values.items()
    })


@dataclass(frozen=True)
class GivenOptions:
    """The options the inputs give (layers 1-4: flags, file, environment, aliases), merged once, before any
    default: what the planner needs before it knows the recipe (the model to read), and what
    ``resolve_given`` adds the defaults to and checks."""

    target: str
    candidates: Mapping[str, _Candidate]
    notes: _Messages

    def text(self, key: str) -> str | None:
        """The value given for ``key``, as written; None: not given."""
        candidate = self.candidates.get(full_key(key))
        return candidate.value if candidate is not None else None


def given_options(inputs: OptionInputs, *, target: str) -> GivenOptions:
    """Layer the inputs (see the module docstring) and expand aliases; ``inputs.recipe_defaults`` are not read."""
    if target not in TARGET_NAMES:
        raise OptionError(f"unknown target {target!r}", hint=f"use one of: {', '.join(TARGET_NAMES)}")
    notes = _Messages(secrets=secret_values(inputs.env))
    layers = [_cli_layer(inputs), _properties_layer(inputs, notes), _env_layer(inputs, target, notes)]
    for layer in layers:
        _carry_deprecated_keys(layer, target, notes)

    merged: dict[str, _Candidate] = {}
    for layer in layers:
        for key, candidate in layer.items():
            merged.setdefault(key, candidate)
    _apply_value_deprecations(merged, notes)
    _expand_alias(merged)
    return GivenOptions(target=target, candidates=merged, notes=notes)


def resolve_given(given: GivenOptions, recipe_defaults: Mapping[str, str], *, strict: bool = False) -> OptionResolution:
    """``given`` with the recipe's defaults, then the option table's, every value checked once."""
    merged = dict(given.candidates)
    notes = replace(given.notes, errors=list(given.notes.errors), warnings=list(given.notes.warnings))
    for key, value in recipe_defaults.items():
        merged.setdefault(full_key(key), _Candidate(full_key(key), value, Source.RECIPE, "recipe"))
    _apply_table_defaults(merged, given.target)

    values: dict[str, ResolvedValue] = {}
    current = {key: candidate.value for key, candidate in merged.items()}
    for key in sorted(merged, key=_order):
        candidate = merged[key]
        text, typed = _check(candidate, given.target, current, notes)
        values[key] = ResolvedValue(key=key, value=text, typed=typed, source=candidate.source,
                                    origin=candidate.origin, given=candidate.given)

    errors, warnings = notes.errors, notes.warnings
    if strict:
        errors = errors + warnings
        warnings = []
    return OptionResolution(options=ResolvedOptions(values=values), errors=errors, warnings=warnings)


def resolve_options(inputs: OptionInputs, *, target: str, strict: bool = False) -> OptionResolution:
    """Layer the inputs (see the module docstring), expand aliases, apply defaults, validate."""
    return resolve_given(given_options(inputs, target=target), inputs.recipe_defaults, strict=strict)


# ------------------------------------------------------------------------------ layers
def _cli_layer(inputs: OptionInputs) -> dict[str, _Candidate]:
    layer: dict[str, _Candidate] = {}
    for raw_key, (value, origin) in inputs.cli.items():
        key = full_key(raw_key)
        layer[key] = _Candidate(key, value, Source.CLI, origin)
    return layer


def _properties_layer(inputs: OptionInputs, notes: _Messages) -> dict[str, _Candidate]:
    if inputs.properties_file is None:
        return {}
    parsed = read_properties_with_lines(inputs.properties_file)
    notes.warnings.extend(parsed.warnings)
    return {
        key: _Candidate(key, entry.value, Source.PROPERTIES, entry.where) for key, entry in parsed.values.items()
    }


def _env_layer(inputs: OptionInputs, target: str, notes: _Messages) -> dict[str, _Candidate]:
    translated = translate_env(inputs.env, target=target)
    notes.errors.extend(translated.errors)
    notes.warnings.extend(translated.warnings)
    return {key: _Candidate(key, item.value, Source.ENV, item.origin) for key, item in translated.values.items()}


# ------------------------------------------------------------------------------ rewriting
def _carry_deprecated_keys(layer: dict[str, _Candidate], target: str, notes: _Messages) -> None:
    for key in list(layer):
        spec = exact_spec(key)
        if spec is None or spec.deprecated is None or not spec.deprecated.applies_to(target):
            continue
        deprecation = spec.deprecated
        candidate = layer[key]
        since = f" since LMI {deprecation.since}" if deprecation.since else ""
        subject = f"{key}={notes.show(key, candidate.value)} ({candidate.origin})"
        replacement = deprecation.replacement
        if replacement is None:
            notes.warn("deprecated_option", f"{subject} is deprecated{since}", deprecation.note)
            continue
        if spec.problem(candidate.value) is not None:
            continue  # reported as invalid_value by _check
        new_value = deprecation.values.get(spec.normalize(candidate.value), None)
        if deprecation.values and new_value is None:
            del layer[key]
            notes.warn("deprecated_option", f"{subject} is deprecated{since} and has no effect; it is dropped",
                       f"delete {key}")
            continue
        carried = new_value if new_value is not None else candidate.value
        del layer[key]
        existing = layer.get(replacement)
        if existing is not None and existing.value != carried:
            notes.warn(
                "conflicting_options",
                f"{subject} is deprecated{since} and ignored: {replacement}={existing.value} "
                f"({existing.origin}) is also set",
                f"delete {key}",
            )
            continue
        layer[replacement] = _Candidate(replacement, carried, candidate.source, f"{candidate.origin} ({key})")
        notes.warn(
            "deprecated_option",
            f"{subject} is deprecated{since}; carried over as {replacement}={carried}",
            f"write {replacement}={carried} instead",
        )


def _apply_value_deprecations(merged: dict[str, _Candidate], notes: _Messages) -> None:
    for candidate in merged.values():
        spec = exact_spec(candidate.key)
        if spec is None or candidate.value not in spec.deprecated_values:
            continue
        deprecation = spec.deprecated_values[candidate.value]
        since = f" since LMI {deprecation.since}" if deprecation.since else ""
        subject = f"{candidate.key}={candidate.value} ({candidate.origin}) is deprecated{since}"
        if deprecation.replacement is not None:
            notes.warn(
                "deprecated_value",
                f"{subject}; carried over as {candidate.key}={deprecation.replacement}",
                f"write {candidate.key}={deprecation.replacement} instead",
            )
            candidate.value = deprecation.replacement
        else:
            notes.warn("deprecated_value", subject, deprecation.note)


def _expand_alias(merged: dict[str, _Candidate]) -> None:
    """Only an engine the user gave is expanded: the table default is written as is, so the
    container keeps choosing its own entry point (it differs between containers)."""
    engine = merged.get("engine")
    if engine is None or engine.source not in _EXPLICIT:
        return
    alias = alias_for("engine", engine.value)
    if alias is None:
        return
    origin = f"engine={engine.value} ({engine.origin})"
    for key, value in alias.sets.items():
        if key == alias.key or key not in merged:
            merged[key] = _Candidate(key, value, Source.ALIAS, origin,
                                     given=engine.value if key == alias.key else None)


def _apply_table_defaults(merged: dict[str, _Candidate], target: str) -> None:
    current = {key: candidate.value for key, candidate in merged.items()}
    for spec in all_option_specs():
        if spec.key in merged or spec.restricted or not spec.applies_to(target):
            continue
        default = spec.default_for(target)
        if default is None or not spec.is_active(current):
            continue
        merged[spec.key] = _Candidate(spec.key, default, Source.DEFAULT, _TABLE_ORIGIN)


# ------------------------------------------------------------------------------ checking
def _check(
    candidate: _Candidate, target: str, current: Mapping[str, str], notes: _Messages
) -> tuple[str, OptionValue | None]:
    """Report what is wrong with one resolved value; return its canonical spelling and its typed
    value (None when it does not parse: reported here, once, so no reader needs to)."""
    key, value, origin = candidate.key, candidate.value, candidate.origin
    spec = exact_spec(key)
    if candidate.source is Source.DEFAULT and spec is not None:
        return value, spec.parse(value)  # the table validated its own defaults when it loaded
    if is_secret_key(key):
        notes.warn(
            "secret_option",
            f"{key} ({origin}) looks like a credential and would be written to serving.properties in clear text",
            "pass credentials through the environment (HF_TOKEN, AWS_*) instead",
        )
    if spec is None:
        notes.unknown += 1
        notes.warn(
            "unknown_option",
            f"unknown option {key} ({origin}); it is kept and passed through to serving.properties",
            # A spelling suggestion costs a fuzzy match over the table: for the first few only.
            _suggestion(key) if notes.unknown <= _SUGGESTIONS else _NO_SUGGESTION,
        )
        return value, value  # passed through as text: nothing downstream reads a key it does not know
    typed, problem = spec.read(value)
    if problem is not None:
        notes.error("invalid_value", f"{key}={notes.show(key, value)}: {problem} (from {origin})", _valid(spec))
        return value, None
    if candidate.source in _EXPLICIT or candidate.source is Source.RECIPE:
        if spec.targets and not spec.applies_to(target):
            notes.warn(
                "option_not_for_target",
                f"{key} ({origin}) applies to {', '.join(spec.targets)}, not {target}; it is passed through unchanged",
                f"remove {key} when building for {target}",
            )
        elif spec.active_when and not spec.is_active(current):
            condition = " and ".join(f"{k} is {' or '.join(v)}" for k, v in spec.active_when.items())
            notes.warn("option_inactive", f"{key} ({origin}) has no effect unless {condition}", None)
    return spec.normalize(value), typed


def _valid(spec: OptionSpec) -> str:
    bounds = []
    if spec.minimum is not None:
        bounds.append(f"{'>' if spec.exclusive_minimum else '>='} {spec.minimum:g}")
    if spec.maximum is not None:
        bounds.append(f"<= {spec.maximum:g}")
    extra = f" ({', '.join(bounds)})" if bounds else ""
    return f"{spec.key} takes {spec.expected()}{extra}"


def _suggestion(key: str) -> str:
    prefixed = exact_spec(f"option.{key}") if not key.startswith("option.") else None
    if prefixed is not None:
        return f"did you mean {prefixed.key}? (serving.properties keys need the option. prefix)"
    folded = [spec.key for spec in all_option_specs() if spec.key.lower() == key.lower()]
    close = folded or difflib.get_close_matches(key, [spec.key for spec in all_option_specs()], n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]}?"
    return _NO_SUGGESTION


_NO_SUGGESTION = "check the spelling; `lmi-build config options` lists every known option"
_SUGGESTIONS = 50


def _order(key: str) -> tuple[int, str]:
    if key == "engine":
        return (0, key)
    return (1 if not key.startswith("option.") else 2, key)
