"""Collects every validation problem of a plan (never stop at the first one)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lmi_build.types import PlanMessage


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

    @staticmethod
    def _add(into: list[PlanMessage], message: PlanMessage) -> None:
        # The same problem reached by two routes (e.g. CLI and recipe checks) is reported once.
        if message not in into:
            into.append(message)
