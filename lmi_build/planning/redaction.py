"""A plan as it may be shown or saved: no credential in it.

``plan`` prints and ``--save`` writes a plan that may hold what a user typed (``-o
option.hf_token=...``, an AWS key pasted into an option, ``https://user:pw@host`` in
``option.model_id``). Such a plan can never be built (the packager refuses to write a credential
into serving.properties), so hiding the values loses nothing; printing them would leak them into
CI logs and review tools. The rules are those of ``config show`` (``options.redact``).
"""

from __future__ import annotations

from lmi_build.options.redact import environment_secrets, redact, redact_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.types import PlanMessage


def _message(message: PlanMessage, secrets: list[str]) -> PlanMessage:
    hint = redact_text(message.hint, secrets) if message.hint else message.hint
    return message.model_copy(update={"message": redact_text(message.message, secrets), "hint": hint})


def redacted_plan(plan: BuildPlan, secrets: list[str] | None = None) -> BuildPlan:
    """``plan`` with secret-named option values, token-like values, URL passwords and every value
    of a credential variable of the environment replaced by ``***``."""
    known = environment_secrets() if secrets is None else secrets
    return plan.model_copy(update={
        "options": {key: redact(key, value, known) for key, value in plan.options.items()},
        "errors": [_message(m, known) for m in plan.errors],
        "warnings": [_message(m, known) for m in plan.warnings],
        "model": plan.model.model_copy(update={"id": redact_text(plan.model.id, known)}),
    })
