"""Saved plans: ``lmi-build plan ... --save plan.json`` and ``lmi-build <target> --plan plan.json``.

A saved plan is the contract between planning and every later stage: the build, a script bundle,
an exit-3 stop and (later) a fleet task execute exactly this plan and re-derive nothing from flags.
It holds the frozen ``BuildPlan`` (what to build) and the ``BuildInputs`` (where its inputs are:
the model reference and the calibration file, both checked against the plan's digests when used).
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import ValidationError

from lmi_build import __version__
from lmi_build.core.errors import OptionError
from lmi_build.core.fs import atomic_write_text
from lmi_build.core.paths import path_text, text_tree
from lmi_build.core.reading import BadFile, parse_json, read_regular_text
from lmi_build.core.redaction import REDACTED, redact_text
from lmi_build.core.types import FrozenModel, Record
from lmi_build.planning.cache_key import plan_cache_key
from lmi_build.planning.plan import BuildPlan, KnobsT

SAVED_PLAN_FORMAT = "lmi-build-plan"
SAVED_PLAN_SCHEMA = 3  # 2: the knobs carry their target and the file the digest of its content; 3: the memory
# estimate of a paged KV cache (activations, the KV cache share, its tokens and sequences)
PLAN_FILE = "plan.json"
DIGEST_FIELD = "plan_digest"
_HINT = "write one with `lmi-build plan <target> ... --save plan.json`"
_EDITED_HINT = ("plan it again with the change (lmi-build plan <target> ... --save plan.json): a saved plan "
                "is built exactly as planned, never as edited")


class BuildInputs(FrozenModel):
    """Where a plan's inputs are. Locations only: what they must contain is in the plan
    (model identity and digest, calibration digest), so a moved model or file still builds and a
    changed one is refused."""

    model: str  # local directory, org/name, s3://bucket/prefix or demo:NAME
    revision: str | None = None
    allow_pickle: bool = False
    calib_data: Path | None = None  # the user's calibration file (its digest is in the plan)


class SavedPlan(Record, Generic[KnobsT]):
    """A plan and where its inputs are. Generic in the knobs like ``BuildPlan``; a file is read with
    every target's knobs (``lmi_build.targets.load_saved_plan``)."""

    format: Literal["lmi-build-plan"] = "lmi-build-plan"
    schema_version: int = SAVED_PLAN_SCHEMA
    lmi_build_version: str = __version__
    inputs: BuildInputs
    plan: BuildPlan[KnobsT]

    def with_inputs(self, *, model: str | None = None, calib_data: Path | None = None) -> "SavedPlan[KnobsT]":
        """The same plan with its inputs found elsewhere (checked against the plan when fetched)."""
        update: dict[str, object] = {}
        if model is not None:
            update["model"] = model
        if calib_data is not None:
            update["calib_data"] = calib_data
        return self.model_copy(update={"inputs": self.inputs.model_copy(update=update)}) if update else self

    def dumps(self) -> str:
        """The saved form, credentials redacted (a plan holding one cannot be built anyway)."""
        inputs = self.inputs.model_copy(update={"model": redact_text(self.inputs.model)})
        shown = self.model_copy(update={"plan": self.plan.redacted(), "inputs": inputs})
        content = text_tree(shown.model_dump(mode="json"))  # a path under LC_ALL=C holds no lone surrogate
        return json.dumps({**content, DIGEST_FIELD: content_digest(content)}, indent=2) + "\n"

    def save(self, path: Path) -> None:
        atomic_write_text(path, self.dumps())


SavedT = TypeVar("SavedT", bound=SavedPlan[Any])


def content_digest(content: dict[str, Any]) -> str:
    """SHA-256 of a saved plan's content (everything but the digest), key order and spacing aside."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read_saved_plan(path: Path, model: type[SavedT]) -> SavedT:
    """Read a saved plan as ``model`` (``SavedPlan[<knobs>]``), refusing anything but a plan exactly as
    lmi-build wrote it: another file (a plan --json report, a manifest, a corrupt file), an older
    schema, or a plan edited since it was saved (its content digest, a field left out or added, a
    value lmi-build would not write, a cache key that is not its content's). One line says what to do."""
    if not path.exists():
        raise OptionError(f"plan file {path} does not exist", hint=_HINT)
    try:
        text = read_regular_text(path, what="plan file")
    except BadFile as error:
        raise OptionError(error.message, hint=error.hint) from None
    except (OSError, UnicodeDecodeError) as error:
        raise OptionError(f"plan file {path} is not readable ({type(error).__name__})", hint=_HINT) from None
    return parse_saved_plan(text, str(path), model)


def parse_saved_plan(text: str, origin: str, model: type[SavedT]) -> SavedT:
    """``read_saved_plan`` of a plan's text (a fleet task carries it); ``origin`` names it in errors."""
    hint = _HINT
    path = origin
    try:
        data = parse_json(text, what=f"plan file {path}")
    except BadFile as error:
        raise OptionError(error.message, hint=hint) from None
    if not isinstance(data, dict) or data.get("format") != SAVED_PLAN_FORMAT:
        raise OptionError(f"{path} is not a saved lmi-build plan", hint=hint)
    if data.get("schema_version") != SAVED_PLAN_SCHEMA:
        raise OptionError(f"{path} is a saved plan of schema {data.get('schema_version')}; this lmi-build "
                          f"reads schema {SAVED_PLAN_SCHEMA}", hint="plan it again with this lmi-build")
    content = {key: value for key, value in data.items() if key != DIGEST_FIELD}
    if data.get(DIGEST_FIELD) != content_digest(content):
        raise OptionError(f"plan file {path} was edited after it was saved (its content digest does not match)",
                          hint=_EDITED_HINT)
    try:
        saved = model.model_validate(content)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise OptionError(f"plan file {path} is invalid at {where}: {first['msg']}", hint=hint) from None
    _check_as_written(path, saved, content)
    calib = saved.inputs.calib_data
    found = {"model": path_text(saved.inputs.model), "calib_data": None if calib is None else Path(path_text(str(calib)))}
    return saved.model_copy(update={"inputs": saved.inputs.model_copy(update=found)})


def _check_as_written(path: str, saved: SavedPlan[Any], content: dict[str, Any]) -> None:
    """A plan whose digest was recomputed after an edit still has to be one lmi-build writes: every
    field present with the value lmi-build would write (a field left out is not a default), its
    verdict its own errors', and its cache key the one its content gives."""
    difference = _first_difference(saved.model_dump(mode="json"), content)
    if difference is not None:
        raise OptionError(f"plan file {path} is not as lmi-build writes it ({difference})", hint=_EDITED_HINT)
    plan = saved.plan
    if plan.valid == bool(plan.errors):
        raise OptionError(f"plan file {path} says valid={plan.valid} with {len(plan.errors)} error(s)",
                          hint=_EDITED_HINT)
    if not _redacted(plan) and plan_cache_key(plan) != plan.cache_key:
        raise OptionError(f"plan file {path} carries a cache key that is not its content's", hint=_EDITED_HINT)


def _first_difference(written: Any, read: Any, where: str = "") -> str | None:
    if isinstance(written, dict) and isinstance(read, dict):
        for key in written.keys() | read.keys():
            here = f"{where}.{key}" if where else str(key)
            if key not in read:
                return f"{here} is missing"
            if key not in written:
                return f"{here} is not a field"
            found = _first_difference(written[key], read[key], here)
            if found is not None:
                return found
        return None
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        for index, (a, b) in enumerate(zip(written, read, strict=True)):
            found = _first_difference(a, b, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    return None if written == read and type(written) is type(read) else f"{where or 'the plan'} has an unexpected value"


def _redacted(plan: BuildPlan[Any]) -> bool:
    """Whether saving replaced a credential in the options (such a plan cannot be built anyway, and
    its cache key was computed before the value was hidden)."""
    return any(REDACTED in value for value in plan.options.values())
