"""Collects every validation problem of a plan (never stop at the first one)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lmi_build.core.types import PlanMessage


@dataclass
class Findings:
    errors: list[PlanMessage] = field(default_factory=list)
    warnings: list[PlanMessage] = field(default_factory=list)

    def error(self, code: str, message: str, hint: str | None = None) -> None:
        self._add(self.errors, PlanMessage(code=code, message=message, hint=hint))

    def warn(self, code: str, message: str, hint: str | None = None) -> None:
        self._add(self.warnings, PlanMessage(code=code, message=message, hint=hint))

    def add_errors(self, messages: Iterable[PlanMessage]) -> None:
        for message in messages:
            self._add(self.errors, message)

    def add_warnings(self, messages: Iterable[PlanMessage]) -> None:
        for message in messages:
            self._add(self.warnings, message)

    def has(self, code: str) -> bool:
        return any(m.code == code for m in self.errors)

    # What each list already holds, so that adding stays linear (8k options used to take 80 s).
    _seen: dict[int, set[tuple[str, str, str | None]]] = field(default_factory=dict, repr=False)

    def _add(self, into: list[PlanMessage], message: PlanMessage) -> None:
        # The same problem reached by two routes (e.g. CLI and recipe checks) is reported once.
        seen = self._seen.setdefault(id(into), set())
        if len(seen) != len(into):  # the list was changed directly: index it again
            seen.clear()
            seen.update((m.code, m.message, m.hint) for m in into)
        key = (message.code, message.message, message.hint)
        if key not in seen:
            seen.add(key)
            into.append(message)
