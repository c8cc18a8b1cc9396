"""The trtllm target's build knobs: what a plan fixes for its build (``BuildPlan[TrtllmBuild]``)."""

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from lmi_build.planning.plan import TargetKnobs
from lmi_build.planning.request import KNOBS_PANEL, PipelineAndLengthsRequest, knob


class TrtllmBuild(TargetKnobs):
    """TensorRT-LLM: the checkpoint conversion and trtllm-build's settings."""

    target: Literal["trtllm"] = "trtllm"
    tp: int
    pp: int = 1
    dtype: Literal["float16", "bfloat16", "float32"]
    max_input_len: int
    max_output_len: int
    max_seq_len: int  # max_input_len + max_output_len
    max_batch_size: int
    max_num_tokens: int | None = None
    max_beam_width: int = 1
    tokens_per_block: int | None = None  # None: the toolchain's default
    gemm_plugin: str | None = None  # dtype string or None (disabled)
    gpt_attention_plugin: str | None = None
    use_paged_context_fmha: bool = False
    use_fused_mlp: bool | None = None
    multi_block_mode: bool | None = None
    use_custom_all_reduce: bool | None = None
    enable_kv_cache_reuse: bool = False
    rotary_base: float | None = None
    rotary_dim: int | None = None
    rotary_scaling_type: str | None = None
    rotary_scaling_factor: float | None = None
    model_version: dict[str, str] = Field(default_factory=dict)  # {"baichuan_model_version": "v2_13b"}
    checkpoint_route: Literal["modelopt", "vendor"] = "modelopt"
    # modelopt route: "stream" writes ModelOpt's unquantized layout tensor by tensor (bounded memory,
    # quantize/trtllm_stream.py); "modelopt" loads the model into ModelOpt's exporter.
    checkpoint_writer: Literal["modelopt", "stream"] = "modelopt"
    modelopt_decoder: str | None = None
    trtllm_architecture: str | None = None
    trtllm_example: str | None = None

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def summary(self) -> dict[str, str]:
        return {"tp": str(self.tp), "pp": str(self.pp), "dtype": self.dtype}


@dataclass(frozen=True)
class TrtllmRequest(PipelineAndLengthsRequest):
    """trtllm's own knobs, beside ``PlanRequest``'s: the pipeline split and lengths the engines are built
    for, and the serving GPU."""

    gpu: str | None = knob(
        flag="--gpu", panel=KNOBS_PANEL, follows="--instance-type",
        help="trtllm: the serving GPU (a10g, a100, l4, h100, or an SM such as sm90): FP8 needs sm89+.")
