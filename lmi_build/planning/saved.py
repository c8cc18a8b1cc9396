"""Saved plans: ``lmi-build plan ... --save plan.json`` and ``lmi-build <target> --plan plan.json``.

A saved plan is the contract between planning and every later stage: the build, a script bundle,
an exit-3 stop and (later) a fleet task execute exactly this plan and re-derive nothing from flags.
It holds the frozen ``BuildPlan`` (what to build) and the ``BuildInputs`` (where its inputs are:
the model reference and the calibration file, both checked against the plan's digests when used).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from lmi_build import __version__
from lmi_build.errors import OptionError
from lmi_build.planning.plan import BuildPlan

SAVED_PLAN_FORMAT = "lmi-build-plan"
SAVED_PLAN_SCHEMA = 1
PLAN_FILE = "plan.json"


class BuildInputs(BaseModel):
    """Where a plan's inputs are. Locations only: what they must contain is in the plan
    (model identity and digest, calibration digest), so a moved model or file still builds and a
    changed one is refused."""

    model_config = ConfigDict(frozen=True)

    model: str  # local directory, org/name, s3://bucket/prefix or demo:NAME
    revision: str | None = None
    allow_pickle: bool = False
    calib_data: Path | None = None  # the user's calibration file (its digest is in the plan)


class SavedPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    format: Literal["lmi-build-plan"] = "lmi-build-plan"
    schema_version: int = SAVED_PLAN_SCHEMA
    lmi_build_version: str = __version__
    inputs: BuildInputs
    plan: BuildPlan

    def with_inputs(self, *, model: str | None = None, calib_data: Path | None = None) -> SavedPlan:
        """The same plan with its inputs found elsewhere (checked against the plan when fetched)."""
        update: dict[str, object] = {}
        if model is not None:
            update["model"] = model
        if calib_data is not None:
            update["calib_data"] = calib_data
        return self.model_copy(update={"inputs": self.inputs.model_copy(update=update)}) if update else self

    def dumps(self) -> str:
        """The saved form, credentials redacted (a plan holding one cannot be built anyway)."""
        from lmi_build.options.redact import redact_text
        from lmi_build.planning.redaction import redacted_plan

        inputs = self.inputs.model_copy(update={"model": redact_text(self.inputs.model)})
        shown = self.model_copy(update={"plan": redacted_plan(self.plan), "inputs": inputs})
        return json.dumps(shown.model_dump(mode="json"), indent=2) + "\n"

    def save(self, path: Path) -> None:
        from lmi_build.fs import atomic_write_text

        atomic_write_text(path, self.dumps())


def load_saved_plan(path: Path) -> SavedPlan:
    """Read a saved plan; anything else (a plan --json report, a manifest, a corrupt file) is one
    line that says what to do."""
    hint = "write one with `lmi-build plan <target> ... --save plan.json`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OptionError(f"plan file {path} does not exist", hint=hint) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OptionError(f"plan file {path} is not readable JSON ({error})", hint=hint) from None
    if not isinstance(data, dict) or data.get("format") != SAVED_PLAN_FORMAT:
        raise OptionError(f"{path} is not a saved lmi-build plan", hint=hint)
    if data.get("schema_version") != SAVED_PLAN_SCHEMA:
        raise OptionError(f"{path} is a saved plan of schema {data.get('schema_version')}; this lmi-build "
                          f"reads schema {SAVED_PLAN_SCHEMA}", hint="plan it again with this lmi-build")
    try:
        saved = SavedPlan.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise OptionError(f"plan file {path} is invalid at {where}: {first['msg']}", hint=hint) from None
    return saved
