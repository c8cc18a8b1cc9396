"""The schema of a recipe file (``recipes/<family>.toml``): architecture knowledge as data.

A recipe says which configs it matches, which targets support the family, which quantizations
each target can apply, which architecture-restricted options it allows, its per-target defaults,
and how to infer version options (``baichuan_model_version`` ...) from the config.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TargetName = Literal["trtllm", "neuronx", "hf"]


class TargetSupport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

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


class InferRule(BaseModel):
    """``value`` applies when every ``when`` key of the raw config equals (or, for lists, is one of)
    the given value. Keys may be dotted paths into nested dicts (``attn_config.kv_n_heads``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    when: dict[str, Any]
    value: str


class VersionOption(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str  # e.g. "option.baichuan_model_version"
    targets: tuple[TargetName, ...] = ("trtllm",)
    choices: tuple[str, ...]
    infer: tuple[InferRule, ...] = ()
    required: bool = True  # no rule matched and not given by the user -> plan error


class Recipe(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: int  # bump when the recipe's build-relevant content changes (part of the cache key)
    description: str = ""
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    targets: dict[TargetName, TargetSupport] = Field(default_factory=dict)
    version_options: tuple[VersionOption, ...] = ()

    def supports(self, target: str) -> bool:
        return target in self.targets
