"""Hugging Face target: a (optionally ModelOpt-quantized) HF checkpoint for the LMI Python engines
(vLLM, LMI-Dist, TensorRT-LLM's PyTorch backend), which compile nothing ahead of time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolved import ResolvedOptions
from lmi_build.planning import checks
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import Workload
from lmi_build.planning.plan import HfBuild, QuantizationPlan, ToolchainRef
from lmi_build.planning.targets import ContainerFacts, TargetPlan
from lmi_build.recipes.schema import TargetSupport
from lmi_build.types import TargetName
from lmi_build.versions import installed_versions

if TYPE_CHECKING:
    from lmi_build.building.context import BuildContext, BuildSettings
    from lmi_build.planning.saved import SavedPlan

DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_MAX_SEQ_LEN = 4096  # the memory estimate's sequence length when no max length is given
# The packages whose versions decide the exported bytes (read from metadata: nothing is imported).
_TOOL_PACKAGES = ("transformers", "nvidia-modelopt", "safetensors")


class HfTarget:
    name: TargetName = "hf"
    engine = "Python"

    def preflight(self, saved: SavedPlan, settings: BuildSettings) -> None:
        pass  # nothing beyond the plan: the checkpoint step reads only the model and calibration data

    def build(self, ctx: BuildContext) -> None:
        from lmi_build.targets.hf.build import build

        build(ctx)

    def container_profiles(self) -> dict[str, ContainerFacts]:
        return {}  # no container profiles of its own yet

    def checkpoint_route(self, support: TargetSupport, spec: ModelSpec,
                         options: ResolvedOptions) -> Literal["modelopt", "vendor"]:
        return "modelopt"

    def toolchain(self, profile: str | None) -> ToolchainRef:
        return ToolchainRef(target="hf", profile=None, image=None, versions=installed_versions(_TOOL_PACKAGES))

    def plan(self, ctx: PlanContext) -> TargetPlan:
        tp = checks.resolve_tp(ctx)
        checks.check_tp_heads(ctx, tp)
        checks.check_kv_heads_gpu(ctx, tp)
        dtype = checks.resolve_dtype(ctx)

        max_input, max_output = ctx.int_value("max_input_len"), ctx.int_value("max_output_len")
        max_model_len = ctx.int_value("max_model_len")
        if max_input is not None and max_output is not None:
            checks.check_total_length(
                ctx, max_input + max_output, f"max_input_len + max_output_len ({max_input} + {max_output})",
                "lower --max-input-len/--max-output-len so that they sum to at most {limit}")
            seq_len = max_input + max_output
        elif max_model_len is not None:
            checks.check_total_length(ctx, max_model_len, "max_model_len", "lower option.max_model_len to {limit}")
            seq_len = max_model_len
        else:
            limit = checks.max_positions(ctx)
            seq_len = min(limit, DEFAULT_MAX_SEQ_LEN) if limit else DEFAULT_MAX_SEQ_LEN
        batch = ctx.int_value("max_rolling_batch_size") or DEFAULT_MAX_BATCH_SIZE

        build = HfBuild(tp=tp, dtype=dtype, export_format=export_format(ctx.quantization))
        ctx.derive("engine", self.engine, "hf target")
        ctx.derive("tensor_parallel_degree", tp, "resolved tp")
        ctx.derive("dtype", checks.lmi_dtype(dtype), "resolved dtype")
        return TargetPlan(
            build=build,
            toolchain=self.toolchain(None),
            workload=Workload(batch_size=batch, seq_len=seq_len, tp=tp),
            dtype=dtype,
        )


def export_format(quantization: QuantizationPlan) -> Literal["hf", "modelopt_hf", "gptq"]:
    """The checkpoint format of a quantization: GPTQ in the ``quant_method: gptq`` layout the
    vLLM/LMI-Dist loaders know (ModelOpt would label it W4A16_AWQ), other methods in ModelOpt's
    unified format, no quantization (or a pre-quantized input, passed through) as plain HF."""
    if quantization.method is None or quantization.pre_quantized is not None:
        return "hf"
    return "gptq" if quantization.method == "gptq" else "modelopt_hf"


HF = HfTarget()
