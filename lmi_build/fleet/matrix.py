"""The matrix file (``builds.toml``): defaults, builds, product expansion, publish templates.

Every build is planned (no weights, no torch) and checked before any build starts; the result is
one ``Job`` per build, carrying its saved plan: the same contract a single ``--plan`` build runs.
A matrix with any error fails as a whole, listing every error, not only the first.
"""

import itertools
import math
import os
import re
import string
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from lmi_build.core.errors import LmiBuildError
from lmi_build.core.reading import BadFile, parse_toml, read_regular_text
from lmi_build.core.types import Record, TargetName
from lmi_build.fleet.job import Job, resources_for
from lmi_build.planner.make import plan_request
from lmi_build.planner.recheck import recheck_saved_plan
from lmi_build.planning.request import PlanRequest
from lmi_build.planning.saved import SavedPlan
from lmi_build.reporting import github
from lmi_build.reporting.output import printable
from lmi_build.storage.s3url import parse_s3_url
from lmi_build.targets import TARGETS, every_knob, get_target, load_saved_plan, request_for

# A matrix file is a page of TOML; a megabyte is far beyond any real one.
MAX_MATRIX_BYTES = 1024 * 1024
# A fleet run of more builds than this is a typo in a product (10 keys of 4 values is a million).
MAX_BUILDS = 1000
_TEMPLATE_FIELD = re.compile(r"^[a-z_]+$")


def _knobs_model() -> type[BaseModel]:
    """A pydantic model of the knobs (PlanRequest's and every target's), with their own types and defaults:
    a matrix build takes exactly the build commands' flags, declared once (``planning/request.py``).
    TOML numbers stand for text where the flag is text (``tp = 2``, ``n_positions = 4096``)."""
    hints = typing.get_type_hints(PlanRequest)
    for target in TARGETS.values():
        hints.update(typing.get_type_hints(target.request_knobs))
    knobs: dict[str, Any] = {declared.name: (hints[declared.name], declared.default) for declared, _ in every_knob()}
    return create_model("PlanKnobs", __config__=ConfigDict(extra="forbid", coerce_numbers_to_str=True), **knobs)


_PLAN_KNOBS_MODEL = _knobs_model()


class BuildEntry(Record):
    """One ``[[build]]`` table (or ``[defaults]``): a target with the build commands' flags
    (``knobs``, validated as PlanRequest's fields), or a saved plan, plus how to run and publish it.
    ``matrix`` lists values to expand as a product."""

    name: str | None = None  # a template like publish; default: target, model and expanded values
    target: TargetName | None = None
    plan: Path | None = None  # a saved plan.json instead of flags
    runner: Literal["local", "docker", "script"] = "local"  # script: a bundle for a GPU host (no GPU here)
    step_timeout: int | None = Field(default=None, ge=1)
    workers: int | None = Field(default=None, ge=1)  # GPUs an engine build requests (default: world size)
    publish: str | None = None  # s3:// URL template, e.g. "s3://bucket/{model}/{target}-tp{tp}/"
    # Ray node labels the build must run on (templates), e.g. {"lmi-build/profile" = "{profile}"}:
    # how a build reaches the node group whose image is its profile's (docs/FLEETS.md).
    node_labels: dict[str, str] = {}
    matrix: dict[str, list[Any]] = {}
    knobs: dict[str, Any] = {}  # the PlanRequest fields the table set, already validated

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> "BuildEntry":
        """Validate a flat TOML table: its own keys here, every other key as a plan knob."""
        own = {key: value for key, value in table.items() if key in cls.model_fields and key != "knobs"}
        given = {key: value for key, value in table.items() if key not in own}
        knobs = _PLAN_KNOBS_MODEL.model_validate(given).model_dump(exclude_unset=True)
        return cls.model_validate({**own, "knobs": knobs})


class Matrix(Record):
    defaults: dict[str, Any] = {}
    build: list[dict[str, Any]] = []


class MatrixError(LmiBuildError):
    """The matrix cannot run: a summary line, then every problem found, one per line (``details``).

    Exit status 2 when the matrix or its plans are invalid; 1 (the status of any error that stops a
    command: an unreachable Hub or bucket, a missing file) when a build could not be planned at
    all, with those errors' own hints."""

    exit_code = 2
    code = "invalid_matrix"

    def __init__(self, path: Path, problems: list[str], *, errors: list[LmiBuildError] | None = None) -> None:
        self.problems = problems
        failed = [error for error in errors or [] if error.exit_code != 2]
        if failed:
            self.exit_code = 1
            self.code = "matrix_unplanned"
        todo = list(dict.fromkeys(error.hint for error in failed if error.hint))
        if len(failed) < len(problems) or not todo:
            todo.append("fix every listed build")
        super().__init__(f"{path}: {len(problems)} error(s), nothing was built",
                         hint="; ".join(todo) + ", then run the matrix again", details=tuple(problems))


class EntryError(LmiBuildError):
    """A build table of the matrix contradicts itself (an invalid matrix, as a schema error is)."""

    exit_code = 2
    code = "invalid_matrix"


def read_matrix(path: Path) -> Matrix:
    if not path.exists():
        missing = LmiBuildError(f"{path} does not exist", hint="check the matrix file's path")
        raise MatrixError(path, [missing.message], errors=[missing])  # a missing file: exit 1
    try:
        text = read_regular_text(path, limit=MAX_MATRIX_BYTES, what="matrix file")
    except BadFile as error:
        # An unreadable input (a pipe, a directory, too large): exit 1, like a missing file.
        raise MatrixError(path, [error.message], errors=[error]) from None
    github.note_source(path, text)  # a problem of build[2] is annotated on its [[build]] table
    try:
        data = parse_toml(text, what="matrix file")
    except BadFile as error:  # unreadable content: an invalid matrix (exit 2)
        raise MatrixError(path, [error.message]) from None
    try:
        return Matrix.model_validate(data)
    except ValidationError as error:
        raise MatrixError(path, [_validation_message("", error)]) from None


def _validation_message(where: str, error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    return f"{where}{field}: {first['msg']}"


def expand(matrix: Matrix) -> tuple[list[tuple[str, BuildEntry, dict[str, Any]]], list[str]]:
    """Every build after defaults and product expansion: (label, entry, expanded values), and the
    problems found on the way. The label names the table for messages: ``build[2] (tp=2)``."""
    builds: list[tuple[str, BuildEntry, dict[str, Any]]] = []
    problems: list[str] = []
    if not matrix.build:
        problems.append("no [[build]] tables")
    for index, raw in enumerate(matrix.build):
        defaults = matrix.defaults
        if "plan" in raw:  # a saved plan fixes every knob: the defaults' knobs are not for it
            defaults = {key: value for key, value in defaults.items() if key not in _PLAN_KNOBS_MODEL.model_fields}
        merged = {**defaults, **raw}
        product = merged.pop("matrix", None) or {}
        if not isinstance(product, dict) or not all(isinstance(v, list) and v for v in product.values()):
            problems.append(f"build[{index}].matrix: every key needs a non-empty list of values")
            continue
        keys = list(product)
        count = math.prod(len(choices) for choices in product.values())
        if len(builds) + count > MAX_BUILDS:
            problems.append(f"build[{index}].matrix expands to {count:,} builds; a matrix file may hold at most "
                            f"{MAX_BUILDS:,} (split it, or narrow the product)")
            continue
        for values in itertools.product(*(product[k] for k in keys)):
            chosen = dict(zip(keys, values, strict=True))
            label = f"build[{index}]" + (" (" + ", ".join(f"{k}={v}" for k, v in chosen.items()) + ")" if chosen else "")
            try:
                entry = BuildEntry.from_table({**merged, **chosen})
            except ValidationError as error:
                problems.append(_validation_message(f"{label}: ", error))
                continue
            builds.append((label, entry, chosen))
    return builds, problems


def _short_model(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1].removeprefix("demo:"))


def _template_values(saved: SavedPlan, chosen: dict[str, Any]) -> dict[str, str]:
    build = saved.plan.build
    values = {
        "target": saved.plan.target,
        "model": _short_model(saved.inputs.model),
        **(build.summary() if build is not None else {"tp": "", "pp": "1", "dtype": ""}),
        "quantize": saved.plan.quantization.method or "none",
        "profile": saved.plan.toolchain.profile or "",
        "key": saved.plan.cache_key.partition(":")[2][:12],
    }
    # The plan's resolved values win ("float16" for "fp16"); other expanded keys stand as given.
    values.update({k: _short_model(str(v)) for k, v in chosen.items() if k not in values})
    return values


def _fill(template: str, values: dict[str, str], what: str) -> str:
    parsed = list(string.Formatter().parse(template))
    if any(spec or conversion for _, name, spec, conversion in parsed if name is not None):
        # A format spec ("{model:>400000000}") could make any width; names are substituted as they are.
        raise ValueError(f"{what} template {template!r} has a format spec or conversion; write plain {{field}}")
    fields = [name for _, name, _, _ in parsed if name is not None]
    unknown = [name for name in fields if not _TEMPLATE_FIELD.match(name) or name not in values]
    if unknown:
        raise ValueError(f"{what} template names unknown field(s) {', '.join(sorted(set(unknown)))} "
                         f"(known: {', '.join(sorted(values))})")
    return template.format(**values)


def _prefixes_overlap(first: str, second: str) -> bool:
    """Two publish prefixes that are the same, or one inside the other: one publish would replace
    or nest into the other's artifact."""
    a, b = first.rstrip("/") + "/", second.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def model_here(model: str | None, base: Path) -> str | None:
    """A ``model`` that names a local directory, relative to ``base`` (the matrix file's directory) as every
    other path key is (README); a Hugging Face id, ``s3://``, ``demo:`` or an absolute path as given. As on
    the command line, a relative reference is a directory when it starts with ./ or ../ or exists."""
    if model is None or "://" in model or model.startswith(("demo:", "~")) or Path(model).is_absolute():
        return model
    local = base / model
    return str(local) if model.startswith(("./", "../")) or model in (".", "..") or local.exists() else model


def _plan_entry(entry: BuildEntry, base: Path, endpoint_url: str | None = None) -> SavedPlan:
    """The saved plan of one build: loaded (``plan = ...``) or made from its flags. Every path key
    (plan, model, properties, calib_data) is relative to the matrix file."""
    def here(path: Path | None) -> Path | None:
        return path if path is None or path.is_absolute() else base / path

    model = model_here(entry.knobs.get("model"), base)
    if entry.plan is not None:
        given = [name for name, value in entry.knobs.items() if name != "model" and value not in (None, False)]
        if given:
            raise EntryError(f"{', '.join(given)} cannot be combined with plan: the saved plan fixes every knob")
        saved = load_saved_plan(here(entry.plan) or entry.plan).with_inputs(model=model)
        if entry.target is not None and saved.plan.target != entry.target:
            raise EntryError(f"{entry.plan} is a plan for {saved.plan.target}, not {entry.target}")
        if saved.plan.valid:  # the plan is the contract, not a proof that it was checked
            recheck_saved_plan(saved, get_target(saved.plan.target), origin=f"plan {entry.plan}",
                               endpoint_url=endpoint_url)
        return saved
    if entry.target is None:
        raise EntryError("target is missing (trtllm, neuronx or hf), and no plan is given")
    knobs = {**entry.knobs, "model": model, "properties": here(entry.knobs.get("properties")),
             "calib_data": here(entry.knobs.get("calib_data"))}
    return plan_request(request_for(entry.target, knobs, env=dict(os.environ)), get_target(entry.target))


def plan_matrix(path: Path, *, cache: str | None, endpoint_url: str | None = None) -> list[Job]:
    """Every build of the matrix file, planned and checked; MatrixError lists every problem."""
    matrix = read_matrix(path)
    builds, problems = expand(matrix)
    unplanned: list[LmiBuildError] = []  # builds that could not be planned at all (not invalid plans)
    jobs: list[Job] = []
    taken = _Taken()
    for label, entry, chosen in builds:
        try:
            saved = _plan_entry(entry, path.parent, endpoint_url)
        except LmiBuildError as error:
            problems.append(f"{label}: {error.message}")
            unplanned.append(error)
            continue
        if not saved.plan.valid:
            problems += [f"{label}: {message.message}" for message in saved.plan.errors]
            continue
        try:
            name, publish, node_labels = _named(entry, _template_values(saved, chosen), chosen)
        except (ValueError, KeyError, IndexError, LmiBuildError) as error:
            problems.append(f"{label}: {getattr(error, 'message', error)}")
            continue
        key = saved.plan.cache_key
        clash = taken.clash(key, name, publish)
        if clash is not None:
            problems.append(f"{label}: {clash}")
            continue
        taken.claim(label, key, name, publish)
        jobs.append(Job(name=name, saved_plan=saved.dumps(), cache_key=key, target=saved.plan.target,
                        publish=publish, cache=cache, endpoint_url=endpoint_url, runner=entry.runner,
                        step_timeout_s=entry.step_timeout, node_labels=node_labels,
                        resources=resources_for(saved, entry.runner, entry.workers)))
    if problems:
        raise MatrixError(path, problems, errors=unplanned)
    return jobs


def _named(entry: BuildEntry, values: dict[str, str],
           chosen: dict[str, Any]) -> tuple[str, str | None, dict[str, str]]:
    """The build's name, publish URL and node labels, from its templates (or the default name)."""
    # Numbers get their key ("tp2"), words stand for themselves ("awq"): hf-tiny-llama-tp2-awq.
    default_name = "-".join([values["target"], values["model"],
                             *(f"{k}{values[k]}" if values[k].isdigit() else values[k]
                               for k in chosen if k not in ("target", "model"))])
    name = _fill(entry.name, values, "name") if entry.name else default_name
    values["name"] = name
    publish = _fill(entry.publish, values, "publish") if entry.publish else None
    node_labels = {key: _fill(value, values, f"node_labels.{key}") for key, value in entry.node_labels.items()}
    if publish is not None:
        parse_s3_url(publish)
    if printable(name) != name:  # a name is shown on every line of the run: it must not steer the terminal
        raise ValueError(f"the name {printable(name)} holds control characters; use letters, digits and punctuation")
    return name, publish, node_labels


@dataclass
class _Taken:
    """The cache keys, names and publish prefixes of the builds so far, each with its build's label."""

    by_key: dict[str, str] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)
    by_publish: dict[str, str] = field(default_factory=dict)

    def clash(self, key: str, name: str, publish: str | None) -> str | None:
        """Why a build of these cannot join the matrix: the same artifact, name or an overlapping prefix."""
        if key in self.by_key:
            return f"plans the same artifact as {self.by_key[key]} (cache key {key[:19]}…)"
        if name in self.by_name:
            return f"the name {name} is taken by {self.by_name[name]}; set name = \"...\" templates"
        overlap = next((other for prefix, other in self.by_publish.items()
                        if publish is not None and _prefixes_overlap(prefix, publish)), None)
        if overlap is not None:
            return (f"publishes to {publish}, which overlaps the prefix of {overlap}; "
                    "put a varying field ({tp}, {quantize}, {name}, ...) in the publish template")
        return None

    def claim(self, label: str, key: str, name: str, publish: str | None) -> None:
        self.by_key[key], self.by_name[name] = label, label
        if publish is not None:
            self.by_publish[publish] = label
