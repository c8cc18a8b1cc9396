"""What a target's planning step reads and writes: the model, its recipe, the resolved options,
the instance, the quantization plan, and the findings every check appends to."""

from __future__ import annotations

from dataclasses import dataclass, field

from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions, ResolvedValue, Source, _full_key
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import InstanceType
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.planning.request import PlanRequest
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.types import TargetName

TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


@dataclass
class PlanContext:
    request: PlanRequest
    target: TargetName
    spec: ModelSpec
    recipe: Recipe
    support: TargetSupport
    options: ResolvedOptions
    instance: InstanceType | None
    quantization: QuantizationPlan
    findings: Findings = field(default_factory=Findings)
    # Architecture version options (baichuan_model_version, ...): given or inferred from config.json.
    version_options: dict[str, str] = field(default_factory=dict)
    # serving.properties values the target computes (engine, resolved tp, rolling_batch, ...).
    derived: dict[str, ResolvedValue] = field(default_factory=dict)

    # -- reading options -------------------------------------------------------------------
    def opt(self, key: str) -> str | None:
        derived = self.derived.get(_full_key(key))
        if derived is not None:
            return derived.value
        value = self.options.get(key)
        return value if value not in (None, "") else None

    def user_set(self, key: str) -> bool:
        """True when the value came from the user (flag, properties, env), not a default."""
        return self.options.source_of(key) in (Source.CLI, Source.PROPERTIES, Source.ENV, Source.ALIAS)

    def int_opt(self, key: str, default: int | None = None, *, minimum: int = 1) -> int | None:
        raw = self.opt(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            self.findings.error("option_value", f"{_full_key(key)}={raw} is not an integer",
                                hint=f"set {_full_key(key)} to a whole number >= {minimum}")
            return default
        if value < minimum:
            self.findings.error("option_value", f"{_full_key(key)}={value} is below {minimum}",
                                hint=f"set {_full_key(key)} to a whole number >= {minimum}")
            return default
        return value

    def float_opt(self, key: str) -> float | None:
        raw = self.opt(key)
        if raw is None:
            return None
        try:
            return float(raw)
        except ValueError:
            self.findings.error("option_value", f"{_full_key(key)}={raw} is not a number",
                                hint=f"set {_full_key(key)} to a number such as 2.0")
            return None

    def bool_opt(self, key: str, default: bool | None = None) -> bool | None:
        raw = self.opt(key)
        if raw is None:
            return default
        word = raw.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        self.findings.error("option_value", f"{_full_key(key)}={raw} is not true/false",
                            hint=f"set {_full_key(key)}=true or {_full_key(key)}=false")
        return default

    def int_list_opt(self, key: str) -> tuple[int, ...] | None:
        raw = self.opt(key)
        if raw is None:
            return None
        try:
            values = tuple(sorted({int(part) for part in raw.replace(" ", "").strip("[]").split(",") if part}))
        except ValueError:
            values = ()
        if not values or min(values) < 1:
            self.findings.error("option_value", f"{_full_key(key)}={raw} is not a list of positive integers",
                                hint=f"write it like {_full_key(key)}=256,512,1024")
            return None
        return values

    # -- writing options -------------------------------------------------------------------
    def derive(self, key: str, value: object, origin: str) -> None:
        """Record a value the planner computed (it goes into serving.properties)."""
        full = _full_key(key)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        current = self.options.values.get(full)
        if current is not None and current.value == text:
            return
        self.derived[full] = ResolvedValue(key=full, value=text, source=Source.DERIVED, origin=origin)
