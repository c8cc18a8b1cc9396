"""The hf target's build knobs: what a plan fixes for its build (``BuildPlan[HfBuild]``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lmi_build.planning.plan import TargetKnobs
from lmi_build.planning.request import KNOBS_PANEL, TargetRequest, knob


class HfBuild(TargetKnobs):
    """A Hugging Face checkpoint: tp and dtype, and the checkpoint format the serving engine loads."""

    target: Literal["hf"] = "hf"
    tp: int
    dtype: Literal["float16", "bfloat16", "float32"]
    # hf: plain; modelopt_hf: ModelOpt unified (hf_quant_config.json); gptq/awq: quant_method gptq/awq
    # packed for vLLM/LMI-Dist (lmi_build/targets/hf/data/serving_formats.toml)
    export_format: Literal["hf", "modelopt_hf", "gptq", "awq", "compressed_tensors"] = "hf"

    def summary(self) -> dict[str, str]:
        return {"tp": str(self.tp), "pp": "1", "dtype": self.dtype}


@dataclass(frozen=True)
class HfRequest(TargetRequest):
    """The knobs only hf's build (and trtllm's, which declares the same) takes, beside ``PlanRequest``'s."""

    pp: int | None = knob(flag="--pp", option="option.pipeline_parallel_degree", panel=KNOBS_PANEL, follows="--tp")
    max_input_len: int | None = knob(flag="--max-input-len", option="option.max_input_len", panel=KNOBS_PANEL,
                                     follows="--quantize")
    max_output_len: int | None = knob(flag="--max-output-len", option="option.max_output_len", panel=KNOBS_PANEL,
                                      follows="--max-input-len")
