"""The HF -> TensorRT-LLM tensor map (``data/trtllm_tensor_map.toml``): which architectures an
unquantized checkpoint streams for, and how each TensorRT-LLM tensor is made. Plain data: the
planner reads it without torch."""

import re
from functools import cache
from typing import Literal

from lmi_build.core.tables import bundled_table
from lmi_build.core.types import Record

Split = Literal["replicate", "rows", "columns", "rows_each"]
LAYER = "{i}"


class TensorRule(Record):
    trtllm: str
    hf: list[str]
    hf_else: list[str] = []
    split: Split

    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.trtllm).replace(re.escape(LAYER), r"(\d+)") + "$")


class Family(Record):
    architectures: list[str]
    tensors: list[TensorRule]


class TiedLmHead(Record):
    """Which writers share a tied embedding table with the LM head (no ``lm_head.weight``), cited."""

    modelopt_shared_decoders: list[str]
    modelopt_source: str
    vendor_shared_examples: list[str]
    vendor_source: str


class TensorMapFile(Record):
    families: dict[str, Family]
    tied_lm_head: TiedLmHead


@cache
def _map() -> TensorMapFile:
    return bundled_table("trtllm_tensor_map.toml", TensorMapFile)


def family_for(architecture: str | None) -> Family | None:
    """The tensor map for ``architecture`` (config.json ``architectures[0]``), or None."""
    for family in _map().families.values():
        if architecture in family.architectures:
            return family
    return None


def streamable(architecture: str | None, *, quantized: bool) -> bool:
    """Whether lmi-build writes this model's TensorRT-LLM checkpoint itself, tensor by tensor."""
    return not quantized and family_for(architecture) is not None


def lm_head_written(*, tied: bool, route: Literal["modelopt", "vendor"], decoder: str | None,
                    example: str | None) -> bool:
    """Whether the TensorRT-LLM checkpoint holds ``lm_head.weight`` as a tensor of its own: always for a
    model with its own LM head; for one whose config ties it to the embedding, unless the route's writer
    shares the table (``share_embedding_table``; ``[tied_lm_head]`` of the tensor map, cited there). The
    plan's weight estimate and the written checkpoint's check both read it."""
    if not tied:
        return True
    shared = _map().tied_lm_head
    if route == "modelopt":
        return decoder not in shared.modelopt_shared_decoders
    return example not in shared.vendor_shared_examples
