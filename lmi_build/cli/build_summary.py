"""A build command's GitHub step summary (``GITHUB_STEP_SUMMARY``): the build's row (status, time,
cache hit, size, artifact), the plan's memory per device, and what failed."""

from lmi_build.artifact.manifest import load_manifest
from lmi_build.building.context import BuildOutcome
from lmi_build.core.errors import VerifyError, with_hint
from lmi_build.planning.memory_bar import device_memory, memory_markdown
from lmi_build.planning.plan import BuildPlan
from lmi_build.reporting import github, markdown
from lmi_build.reporting.output import current, human_bytes


def _head(plan: BuildPlan, verdict: str) -> str:
    return f"## lmi-build {markdown.text(plan.target)} {markdown.code(plan.model.id)}: {markdown.text(verdict)}\n"


def _memory(plan: BuildPlan) -> list[str]:
    if plan.memory is None:
        return []
    return ["### Memory per device (the plan's estimate)\n", memory_markdown(device_memory(plan.memory), plan.target)]


def _size(outcome: BuildOutcome) -> str:
    try:
        return human_bytes(load_manifest(outcome.output).total_bytes)
    except (VerifyError, OSError):  # no artifact (a checkpoint kept, a script bundle)
        return ""


def build_summary(outcome: BuildOutcome, seconds: float) -> str:
    plan = outcome.plan
    cached = outcome.status == "cached" or outcome.original_steps is not None
    artifact = (outcome.published or {}).get("url") or str(outcome.output)
    row = [markdown.text(outcome.status), f"{seconds:.1f} s", "hit" if cached else "miss", _size(outcome),
           markdown.code(str(artifact))]
    parts = [_head(plan, outcome.status), markdown.table(["status", "time", "cache", "size", "artifact"], [row],
                                                         right=(1, 3))]
    if outcome.next_command:
        parts.append(f"next{' (' + markdown.text(outcome.next_host) + ')' if outcome.next_host else ''}: "
                     f"{markdown.code(outcome.next_command)}\n")
    return "\n".join([*parts, *_memory(plan)])


def failed_summary(plan: BuildPlan, reason: str) -> str:
    return "\n".join([_head(plan, "failed"), "### What failed\n", f"- {markdown.text(reason)}\n", *_memory(plan)])


def invalid_summary(plan: BuildPlan) -> str:
    lines = [f"- {markdown.text(with_hint(message.message, message.hint))}" for message in plan.errors[:50]]
    return "\n".join([_head(plan, "invalid plan"), "### What failed\n", *lines, "", *_memory(plan)])


def append(markdown_text: str) -> None:
    """Append to the step summary, if there is one: a summary that cannot be written is a warning."""
    try:
        github.append_summary(markdown_text)
    except OSError as error:
        current().warn(f"the step summary could not be written ({error.strerror or error})")
