"""Help text, bounds and choices of the CLI flags that set an option, from those options' table
entries (``lmi_build/data/options.toml``), read when the CLI starts. The options are those a
``PlanRequest`` knob sets; ``plan_flags`` makes the flags from ``HELP`` and the other tables below.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.options.spec import OptionSpec, exact_spec
from lmi_build.planning.checks import DTYPES
from lmi_build.planning.quantization import flag_methods
from lmi_build.targets import every_knob

# Flags that take fewer values than the option they set: the values the build itself makes, where
# the container takes more (option.dtype=int8 is LMI-Dist's; the build casts weights to the dtypes
# of lmi_build.planning.checks.DTYPES only). Their help says these values, in their own words.
FLAG_DESCRIPTIONS = {
    "option.dtype": "Data type the weights are built in; bf16 needs A10G/A100 (G5, P4d) or newer",
    "option.quantize": "Quantization the build applies",
    # The table's "(LMI 0.25: Llama 512, Falcon 1024)" is an old release's default, not the flag's.
    "option.max_output_len": "Most tokens generated per request the engine is compiled for",
}


# A flag's default where the option table's (the LMI-wide one) is not what a plan gives: said as the
# plan says it (lmi_build/targets/trtllm/lengths.py; its warning max_output_len_from_model names the numbers).
FLAG_DEFAULTS = {
    "option.max_output_len": "the profile's: LMI 0.33+ (trtllm-build takes max_seq_len from the model) the "
                             "model's max positions minus max_input_len; older profiles 512, lowered to fit the "
                             "model's positions (trtllm)",
}


def build_choices() -> dict[str, tuple[str, ...]]:
    """The values each narrowed flag accepts, by option key: what the planner builds."""
    return {"option.dtype": tuple(DTYPES)}


@cache  # every flag's facts and help ask; the recipes it reads do not change
def target_choices() -> dict[str, dict[str, tuple[str, ...]]]:
    """The values each flag narrowed per target accepts, by option key, then target: what the
    target's builds make (--quantize: the container's runtime-only quantizations are refused)."""
    return {"option.quantize": {target: flag_methods(target) for target in TARGET_NAMES}}


@dataclass(frozen=True)
class FlagFacts:
    help: str
    minimum: int | None = None  # for typer's min= / max= (integer flags only)
    maximum: int | None = None
    choices: tuple[str, ...] | None = None  # a flag narrower than its option (build_choices)
    # A flag narrowed per target (target_choices): its values and its help, by command (plan: all targets).
    target_choices: Mapping[str, tuple[str, ...]] | None = None
    command_help: Mapping[str, str] | None = None


def flag_facts(option_keys: Iterable[str]) -> dict[str, FlagFacts]:
    """The facts of the flag that sets each option, from the option's table entry, by option key."""
    facts: dict[str, FlagFacts] = {}
    for key in option_keys:
        spec = exact_spec(key)
        if spec is None:
            raise ValueError(f"a flag sets {key}, which the option table does not have")
        integer = spec.type in ("int", "int_or_max")
        minimum = spec.minimum if integer else None
        if minimum is not None and spec.exclusive_minimum:
            minimum += 1
        per_target = target_choices().get(key)
        facts[key] = FlagFacts(
            help=help_text(spec),
            minimum=int(minimum) if minimum is not None else None,
            maximum=int(spec.maximum) if integer and spec.maximum is not None else None,
            choices=build_choices().get(key),
            target_choices=per_target,
            command_help=None if per_target is None else {
                command: help_text(spec, command) for command in ("plan", *per_target)},
        )
    return facts


def help_text(spec: OptionSpec, command: str | None = None) -> str:
    """The table's description (or the flag's own, FLAG_DESCRIPTIONS), its choices (or the flag's
    narrower ones, build_choices; for a flag narrowed per target, ``command``'s: a build command's
    target's, or each target's for ``plan``) and its default on each target it applies to."""
    parts = [FLAG_DESCRIPTIONS.get(spec.key, spec.description).rstrip(".") + "."]
    per_target = target_choices().get(spec.key)
    choices = build_choices().get(spec.key, spec.choices)
    narrowed = [choice for choice in choices if choice not in spec.choices]
    narrowed += [choice for values in (per_target or {}).values() for choice in values if choice not in spec.choices]
    if narrowed:
        raise ValueError(f"the flag that sets {spec.key} would take {narrowed}, which the option table refuses")
    if per_target is not None and command in per_target:
        parts.append(f"One of: {', '.join(per_target[command])}.")
    elif per_target is not None:
        parts.append("One of: " + "; ".join(f"{target}: {', '.join(values) or 'none'}"
                                            for target, values in per_target.items()) + ".")
    elif choices:
        parts.append(f"One of: {', '.join(choices)}.")
    if (default := _default_text(spec)) is not None:
        parts.append(f"Default: {default}.")
    parts.append(f"Sets {spec.key}.")
    return " ".join(parts).replace("[", "\\[")  # the CLI's help is rich markup


def _default_text(spec: OptionSpec) -> str | None:
    if spec.key in FLAG_DEFAULTS:
        return FLAG_DEFAULTS[spec.key]
    if spec.derived_default is not None:
        return spec.derived_default
    targets = [target for target in TARGET_NAMES if spec.applies_to(target)]
    defaults = {target: spec.default_for(target) for target in targets}
    values = [value for value in defaults.values() if value is not None]
    if not values:
        return None
    common = max(sorted(set(values)), key=values.count)
    exceptions = [f"{target}: {value}" for target, value in defaults.items() if value not in (common, None)]
    if exceptions:
        return "; ".join([common, *exceptions])
    if values.count(common) == len(TARGET_NAMES):
        return common
    return f"{common} ({', '.join(target for target, value in defaults.items() if value == common)})"


# By option key, for the flags of every knob (common and each target's) that sets one (plan_flags).
FACTS = flag_facts(how.option for _, how in every_knob() if how.option is not None)
HELP = {key: fact.help for key, fact in FACTS.items()}
MINIMUM = {key: fact.minimum for key, fact in FACTS.items() if fact.minimum is not None}
MAXIMUM = {key: fact.maximum for key, fact in FACTS.items() if fact.maximum is not None}
CHOICES = {key: fact.choices for key, fact in FACTS.items() if fact.choices is not None}
TARGET_CHOICES = {key: fact.target_choices for key, fact in FACTS.items() if fact.target_choices is not None}
COMMAND_HELP = {key: fact.command_help for key, fact in FACTS.items() if fact.command_help is not None}
