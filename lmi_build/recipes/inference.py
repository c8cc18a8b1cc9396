"""Version options (``baichuan_model_version``, ``chatglm_model_version`` ...) from the config.

TensorRT-LLM builds a different graph per version and some LMI defaults are wrong for most
checkpoints (Baichuan defaults to v1_13b), so the version is inferred from the config when its
shapes or name tell it, and must be given by the user when they do not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmi_build.core.types import PlanMessage
from lmi_build.model.lookup import get_path, matches
from lmi_build.model.spec import ModelSpec
from lmi_build.recipes.schema import InferRule, Recipe, VersionOption

_ABSENT = object()


def infer_version_options(
    recipe: Recipe, spec: ModelSpec, target: str, given: Mapping[str, str]
) -> tuple[dict[str, str], list[PlanMessage]]:
    """Resolve each version option of ``recipe`` that applies to ``target``.

    ``given`` holds the user's options, keyed ``option.x`` or ``x``. Returns the values keyed by
    the short option name (``{"baichuan_model_version": "v2_13b"}``) and plan messages: an error
    ``model_version_invalid`` for a value outside the choices, an error ``model_version_required``
    when no value is given or inferable, a warning ``model_version_mismatch`` when the user's value
    differs from what the config implies (the user's value wins).
    """
    values: dict[str, str] = {}
    messages: list[PlanMessage] = []
    for option in recipe.version_options:
        if target not in option.targets:
            continue
        user_value = given.get(option.key, given.get(option.name))
        inferred = infer_value(option, spec.raw)
        if user_value is not None:
            if user_value not in option.choices:
                messages.append(_invalid(option, user_value))
                continue
            values[option.name] = user_value
            if inferred is not None and inferred != user_value:
                messages.append(_mismatch(option, user_value, inferred))
        elif inferred is not None:
            values[option.name] = inferred
        elif option.required:
            messages.append(_required(recipe, option))
        elif option.default is not None:
            values[option.name] = option.default
    return values, messages


def infer_value(option: VersionOption, config: Mapping[str, Any]) -> str | None:
    """The value of the first rule that holds for ``config``, or ``None``."""
    for rule in option.infer:
        if rule_holds(rule, config):
            return rule.value
    return None


def rule_holds(rule: InferRule, config: Mapping[str, Any]) -> bool:
    if not matches(config, rule.when.items()):
        return False
    for key in rule.absent:
        if get_path(config, key, _ABSENT) is not _ABSENT:
            return False
    for key, text in rule.contains.items():
        value = get_path(config, key)
        if not isinstance(value, str) or _fold(text) not in _fold(value):
            return False
    return True


def _fold(text: str) -> str:
    return text.lower().replace("-", "_")


def _choices(option: VersionOption) -> str:
    return ", ".join(option.choices)


def _invalid(option: VersionOption, value: str) -> PlanMessage:
    return PlanMessage(
        code="model_version_invalid",
        message=f"{option.name}={value} is not one of: {_choices(option)}",
        hint=f"set --option {option.name}=<one of {_choices(option)}>",
    )


def _required(recipe: Recipe, option: VersionOption) -> PlanMessage:
    return PlanMessage(
        code="model_version_required",
        message=f"cannot tell which {recipe.name} version this checkpoint is ({option.name}: {_choices(option)})",
        hint=f"set it with --option {option.name}=<one of {_choices(option)}>",
    )


def _mismatch(option: VersionOption, value: str, inferred: str) -> PlanMessage:
    return PlanMessage(
        code="model_version_mismatch",
        message=f"{option.name}={value} was given, but the config looks like {inferred}",
        hint=f"check the checkpoint; drop --option {option.name} to use {inferred}",
    )
