"""A saved plan is built only as its inputs plan it now: ``recheck_saved_plan`` plans them again and
compares every field that decides the build."""

from __future__ import annotations

from lmi_build.core.errors import InvalidPlan
from lmi_build.planner.make import plan_request
from lmi_build.planning.request import PlanRequest
from lmi_build.planning.saved import SavedPlan
from lmi_build.planning.target_api import PlanningTarget
from lmi_build.sources.identity import check_identity

# Where an option's value in a saved plan came from the user (or the planner's own derivation from
# it): given to the planner again as is. Every other value (the recipe's, the LMI default) is the
# planner's to give again, so an edited default is found as a difference.
_GIVEN_SOURCES = frozenset({"cli", "properties", "env", "alias", "derived"})
# What decides the build: compared between a saved plan and the plan its inputs make now. Not
# compared: where values came from, the messages, the memory estimate (its verdict is an error when
# it matters), the convert step's estimate (this host's devices) and the cache key (the saved plan's
# is checked against its content when read: ``saved._check_as_written``).
_DECIDING_FIELDS = ("target", "recipe", "recipe_version", "model", "spec", "options", "build", "quantization",
                    "toolchain")


def recheck_saved_plan(saved: SavedPlan, target: PlanningTarget, *, origin: str,
                       endpoint_url: str | None = None) -> None:
    """Refuse a saved plan that is not the plan its own inputs make now: its model (config.json
    read again), its given options, profile, instance, quantization and calibration file planned
    again, every check of the planner and the target run again, and every field that decides the
    build compared. A plan is the contract, not a proof that it was checked: a plan edited and
    re-digested (tp 3 on 8 heads, trust_remote_code turned on as a default) is refused here, before
    anything is fetched or built. Raises ``InvalidPlan`` with one line."""
    plan = saved.plan
    hint = ("plan it again (lmi-build plan <target> ... --save plan.json): a saved plan is built only as "
            "its inputs plan it")
    given = tuple(f"{key}={value}" for key, value in sorted(plan.options.items())
                  if plan.option_sources.get(key) in _GIVEN_SOURCES)
    quantize = plan.quantization.method if plan.quantization.pre_quantized is None else None
    request = PlanRequest(
        model=saved.inputs.model, revision=saved.inputs.revision, allow_pickle=saved.inputs.allow_pickle,
        calib_data=saved.inputs.calib_data, option=given, quantize=quantize,
        profile=plan.toolchain.profile, instance_type=plan.memory.instance_type if plan.memory else None,
        endpoint_url=endpoint_url)
    again = plan_request(request, target).plan
    check_identity(plan.model, again.model, saved.inputs.model)  # a changed model says so first
    if not again.valid:
        first = again.errors[0]
        raise InvalidPlan(f"{origin} does not pass the planner's checks: {first.message}", hint=hint)
    saved_fields = plan.model_dump(mode="json", include=set(_DECIDING_FIELDS))
    planned_fields = again.model_dump(mode="json", include=set(_DECIDING_FIELDS))
    if plan.model.kind == "local":  # a local directory may have moved: its name is not its identity
        planned_fields["model"]["id"] = saved_fields["model"]["id"]
    for name in _DECIDING_FIELDS:
        difference = _difference(saved_fields.get(name), planned_fields.get(name), name)
        if difference is not None:
            raise InvalidPlan(f"{origin} is not the plan its inputs make: {difference}", hint=hint)


def _difference(saved: object, planned: object, where: str) -> str | None:
    """The first place two JSON values differ, with both values (short)."""
    if isinstance(saved, dict) and isinstance(planned, dict):
        for key in sorted(saved.keys() | planned.keys(), key=str):
            found = _difference(saved.get(key), planned.get(key), f"{where}.{key}")
            if found is not None:
                return found
        return None
    if saved == planned:
        return None
    return f"{where} is {_short(saved)} in the plan, {_short(planned)} when planned again"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
