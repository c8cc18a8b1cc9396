"""The one error hierarchy of lmi-build.

Every user-facing failure is an ``LmiBuildError``: a one-line ``message`` saying what is wrong and
a ``hint`` saying what to do. The CLI formats them once, at its boundary, and shows a traceback
only with ``--debug``. Anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# The most characters one message (an error, a warning, a hint, one detail line) shows: a message
# built from what the user gave (a list of 15,000 context lengths) is shortened in its middle, so
# its start and its end (what to do) stay. Lists inside messages go through ``shown_values`` first.
MESSAGE_CHARS = 2000
# The most values ``shown_values`` lists.
SHOWN_VALUES = 10


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` when it is at most ``limit`` characters, else its start and its end with how much was
    left out between them; the result is never longer than ``limit`` (and bounding it again keeps it)."""
    if len(text) <= limit:
        return text
    note = f" … ({len(text):,} characters, shortened) … "
    keep = max(limit - len(note), 0)
    head = keep * 2 // 3
    return text[:head] + note + text[len(text) - (keep - head):]


def shown_values(values: Iterable[object], limit: int = SHOWN_VALUES) -> str:
    """``[a, b, c]``, or the first ``limit`` values and how many more: ``[1, 2, …, 10, … and 14,990 more]``."""
    listed = list(values)
    shown = ", ".join(repr(value) if isinstance(value, str) else str(value) for value in listed[:limit])
    more = len(listed) - limit
    return f"[{shown}, … and {more:,} more]" if more > 0 else f"[{shown}]"


def with_hint(message: str, hint: str | None) -> str:
    """One line: what went wrong and, in brackets, what to do (every error, warning and plan message)."""
    return f"{message} ({hint})" if hint else message


class LmiBuildError(Exception):
    """Base class: a clean, one-line, user-facing error."""

    #: Process exit code: 1 bad input or a failed operation; 2 only for an invalid plan or artifact.
    exit_code: int = 1
    #: Stable machine-readable code, shown in --json output.
    code: str = "error"

    def __init__(self, message: str, *, hint: str | None = None, code: str | None = None,
                 details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        #: One line per problem when there are several (a matrix's builds): the CLI prints the
        #: message as the summary line, then each of these on its own line.
        self.details = details
        if code is not None:
            self.code = code

    def one_line(self) -> str:
        """The line a user reads: the message and, in brackets, what to do."""
        return with_hint(self.message, self.hint)


class OptionError(LmiBuildError):
    """An unknown option, a value of the wrong type, or a malformed properties file."""

    code = "option"


class InvalidPlan(LmiBuildError):
    """The plan has validation errors; the plan itself carries the list."""

    exit_code = 2
    code = "invalid_plan"


class UnsupportedTarget(LmiBuildError):
    """The architecture, target, or combination cannot be built (a request lmi-build refuses, not an
    invalid plan: a plan's own errors are reported in the plan and exit with 2)."""

    code = "unsupported"


class UnknownName(LmiBuildError):
    """A name that is not in its registry: recipe, container profile, target, artifact layout."""

    code = "unknown_name"


class SourceError(LmiBuildError):
    """A model source cannot be resolved (missing dir, unknown HF id, unreadable S3 prefix)."""

    code = "source"


class PublishError(LmiBuildError):
    """An upload or download failed; nothing local was deleted."""

    code = "publish"


class StorageError(LmiBuildError):
    """An S3 endpoint could not answer what a command asked (unreachable, access denied, clock skew,
    a missing bucket, a redirect, a bound broken): a failure of the infrastructure, exit status 1,
    and never a verdict on an artifact (``verify s3://`` reports this instead of "invalid")."""

    code = "storage"


class VerifyError(LmiBuildError):
    """An artifact is incomplete, corrupted, or incompatible with the serving target."""

    exit_code = 2
    code = "verify"


class StepError(LmiBuildError):
    """A build step (quantize, convert, vendor compiler) failed; ``log`` is its log file, when it wrote one."""

    code = "step"
    log: Path | None = None


class MissingDependency(LmiBuildError):
    """An optional heavy dependency is not installed."""

    code = "missing_dependency"

    @classmethod
    def for_module(cls, module: str, extra: str) -> MissingDependency:
        return cls(
            f"this command needs the Python package '{module}', which is not installed",
            hint=f"install it with: pip install 'lmi-build[{extra}]'",
        )


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a CI cancel, ``timeout``). A ``KeyboardInterrupt`` so that every cleanup
    an interrupt runs (killing the vendor tool's process group, removing work directories) runs
    for it too; the CLI exits with 143 (128 + SIGTERM) instead of 130."""
