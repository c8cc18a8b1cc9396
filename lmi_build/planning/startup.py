"""What a serving container release does with an artifact at start-up.

"The container decides": whether an artifact is good is what the LMI release does with it when it
starts - load it, rebuild/recompile it, or refuse it. Each target package keeps one model of that
start-up path per release (property resolution including the Java recommender's defaults, the loader
chosen, DJL's validators, what is loaded vs compiled), every rule cited to the vendor source at that
release's commit. ``plan``, the build and ``verify --for-container`` all evaluate that one model and
get a ``StartupOutcome``.

Each target's model sees an artifact through its own ``StartupInputs`` (``targets/<name>/startup.py``),
made from a manifest (verify) or from a plan (the artifact the build will write), so plan and verify
evaluate the same rules on the same kind of input.
"""

from typing import Literal

from lmi_build.core.types import FrozenModel, PlanMessage

Outcome = Literal["loads", "recompiles", "rebuilds", "rejected"]


class Citation(FrozenModel):
    """Where a rule is written in the vendor's source: ``repo@ref path:lines``."""

    repo: str  # "deepjavalibrary/djl-serving"
    ref: str  # a release branch ("0.30.0-dlc"), tag or commit
    path: str
    lines: str  # "52-69" or "880"
    inferred: bool = False  # True: read around, not confirmed line by line

    def __str__(self) -> str:
        where = f"{self.repo}@{self.ref} {self.path}:{self.lines}"
        return f"{where} (inferred)" if self.inferred else where


class RuleFinding(FrozenModel):
    """One rule of a release's start-up path that applied to this artifact."""

    rule: str  # stable id, e.g. "tnx.rolling_batch_auto"; a plan/verify message's code
    # "degrades": it loads, but serves otherwise than built (padded batches, unscaled RoPE, other flags)
    effect: Literal["resolves", "loads", "recompiles", "rebuilds", "rejected", "degrades", "warning"]
    message: str  # one line, with the values involved
    cites: tuple[Citation, ...] = ()  # empty only for effect "warning" (a belief without a citation)
    sources: tuple[str, ...] = ()  # citations as a data table writes them ("repo ref path:lines (what)")
    hint: str | None = None  # the fix, as plan and verify print it


class StartupOutcome(FrozenModel):
    """The container release's verdict on an artifact, with every rule that led to it."""

    profile: str  # the container profile evaluated
    outcome: Outcome
    loader: str | None = None  # the loader / backend the release picks ("tnx", "optimum", "trtllm-toolkit", ...)
    resolved: dict[str, str] = {}  # serving.properties after the container's own resolution
    loads: tuple[str, ...] = ()  # what it loads without compiling (NEFF files, engine dirs), when known
    loads_kind: str = "NEFFs"  # what ``loads`` holds, as the summary names it ("engine files")
    rules: tuple[RuleFinding, ...] = ()  # in the order the start-up path applies them

    def deciding(self) -> tuple[RuleFinding, ...]:
        """The rules that made the outcome anything but ``loads``."""
        return tuple(r for r in self.rules if r.effect in ("recompiles", "rebuilds", "rejected"))

    def errors(self) -> tuple[RuleFinding, ...]:
        """The rules plan and verify report as errors: those deciding the outcome, and those it
        loads past but serves otherwise than built."""
        return tuple(r for r in self.rules if r.effect in ("recompiles", "rebuilds", "rejected", "degrades"))

    def summary(self) -> str:
        """One line: "container start-up on <profile>: loads (loader X, N NEFFs)", or "recompiles:
        <why> [citations]", "rebuilds: <why> [citations]", or "rejected: <the vendor's message> [citations]"."""
        head = f"container start-up on {self.profile}: "
        if self.outcome == "loads":
            return head + f"loads (loader {self.loader or 'unknown'}, {len(self.loads)} {self.loads_kind})"
        rule = next(r for r in self.rules if r.effect == self.outcome)
        cited = "; ".join([*map(str, rule.cites), *rule.sources]) or "no citation"
        return head + f"{self.outcome}: {rule.message} [{cited}]"

    def warnings(self) -> tuple[RuleFinding, ...]:
        return tuple(r for r in self.rules if r.effect == "warning")


def outcome_messages(outcome: StartupOutcome) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """(errors, warnings) as plan and verify report them: one per rule, its code the rule's id."""
    def message(rule: RuleFinding) -> PlanMessage:
        return PlanMessage(code=rule.rule, message=rule.message, hint=rule.hint)

    return [message(r) for r in outcome.errors()], [message(r) for r in outcome.warnings()]

