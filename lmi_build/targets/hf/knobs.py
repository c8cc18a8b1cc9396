"""The hf target's build knobs: what a plan fixes for its build (``BuildPlan[HfBuild]``)."""

from dataclasses import dataclass
from typing import Literal

from lmi_build.planning.plan import TargetKnobs
from lmi_build.planning.request import PipelineAndLengthsRequest


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
class HfRequest(PipelineAndLengthsRequest):
    """hf's own knobs, beside ``PlanRequest``'s: the pipeline split and the lengths (the engine that
    serves the checkpoint is started with them)."""

