"""The schema of a recipe file (``recipes/<family>.toml``): architecture knowledge as data.

A recipe says which configs it matches, which targets support the family, which quantizations
each target can apply, which architecture-restricted options it allows, its per-target defaults,
and how to infer version options (``baichuan_model_version`` ...) from the config.
"""

from typing import Any

from pydantic import Field, model_validator

from lmi_build.core.target_names import TargetName
from lmi_build.core.types import Record


class TargetSupport(Record):
    # Quantization methods lmi-build may apply for this family on this target
    # ("smoothquant", "awq", "gptq", "fp8", "int8_wo", "int4_wo" for trtllm/hf; "int8" for neuronx).
    quantize: tuple[str, ...] = ()
    # quant_method values of pre-quantized checkpoints this target accepts as input.
    prequantized: tuple[str, ...] = ()
    # Architecture-restricted options (option table: restricted=true) that this family allows.
    options_allowed: tuple[str, ...] = ()
    # Otherwise-general options this family refuses (e.g. multi_block_mode for Qwen).
    options_refused: tuple[str, ...] = ()
    # Option defaults for this family and target, as serving.properties values.
    defaults: dict[str, str] = {}
    # trtllm: ModelOpt decoder_type for checkpoint export; None means only the vendor
    # convert_checkpoint.py route can produce the checkpoint.
    modelopt_decoder: str | None = None
    # trtllm: the TensorRT-LLM examples/ directory of the vendor conversion scripts.
    trtllm_example: str | None = None
    # trtllm: the "architecture" string of the TensorRT-LLM checkpoint config.json.
    trtllm_architecture: str | None = None
    notes: str = ""


class InferRule(Record):
    """``value`` applies when every ``when`` key of the raw config equals (or, for lists, is one of)
    the given value. Keys may be dotted paths into nested dicts (``attn_config.kv_n_heads``).
    ``contains``: the key's string value contains the text (case-insensitive, ``-`` equals ``_``),
    as TensorRT-LLM itself infers ChatGLM versions from ``_name_or_path``. ``absent``: keys that
    must not be in the config (TOML has no null). A rule needs at least one condition."""

    when: dict[str, Any] = {}
    contains: dict[str, str] = {}
    absent: tuple[str, ...] = ()
    value: str

    @model_validator(mode="after")
    def _has_condition(self) -> "InferRule":
        if not (self.when or self.contains or self.absent):
            raise ValueError("an infer rule needs at least one of when, contains, absent")
        return self


class VersionOption(Record):
    key: str  # e.g. "option.baichuan_model_version"
    targets: tuple[TargetName, ...]  # the targets that read it; no default: the shared schema names no target
    choices: tuple[str, ...]
    infer: tuple[InferRule, ...] = ()
    required: bool = True  # no rule matched and not given by the user -> plan error
    default: str | None = None  # used when not required, not given and no rule matched

    @model_validator(mode="after")
    def _values_are_choices(self) -> "VersionOption":
        unknown = sorted({rule.value for rule in self.infer} - set(self.choices))
        if self.default is not None and self.default not in self.choices:
            unknown.append(self.default)
        if unknown:
            raise ValueError(f"values {unknown} are not among the choices {list(self.choices)}")
        return self

    @property
    def name(self) -> str:
        """The option name without the ``option.`` prefix (``baichuan_model_version``)."""
        return self.key.removeprefix("option.")


class Recipe(Record):
    name: str
    version: int  # bump when the recipe's build-relevant content changes (part of the cache key)
    description: str = ""
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    targets: dict[TargetName, TargetSupport] = Field(default_factory=dict)
    # Why a target has no route for this family (cited): the plan's refusal says it.
    unsupported: dict[TargetName, str] = Field(default_factory=dict)
    version_options: tuple[VersionOption, ...] = ()

    @model_validator(mode="after")
    def _unsupported_targets_have_no_route(self) -> "Recipe":
        both = sorted(set(self.unsupported) & set(self.targets))
        if both:
            raise ValueError(f"targets {both} are both supported and unsupported")
        return self

    def supports(self, target: str) -> bool:
        return target in self.targets
