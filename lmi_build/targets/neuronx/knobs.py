"""The neuronx target's build knobs: what a plan fixes for its build (``BuildPlan[NeuronxBuild]``)."""

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field

from lmi_build.planning.plan import TargetKnobs
from lmi_build.planning.request import KNOBS_PANEL, TargetRequest, knob


class NeuronxBuild(TargetKnobs):
    """transformers-neuronx / optimum-neuron: the NEFF compile exactly as DJL's loader makes it."""

    target: Literal["neuronx"] = "neuronx"
    tp: int
    amp: Literal["f16", "bf16", "f32"]
    n_positions: tuple[int, ...]  # token-generation buckets
    context_length_estimate: tuple[int, ...]  # context-encoding buckets
    batch_size: int
    continuous_batching: bool = False
    gqa_requested: str | None = None
    gqa_effective: str | None = None  # after TNX's silent fallback rules
    unroll: int | None = None
    neuron_optimize_level: int | None = None
    on_device_embedding: bool = False
    compiler_flags: str  # byte-identical to what the serving container computes (NEFF cache key)
    platform: Literal["inf2", "trn1"] | None = None
    loader: Literal["tnx", "optimum", "nxdi", "vllm"] = "tnx"  # the model loader DJL picks
    # The artifact layout: the profile's precompiled layout, or "neuronx-cache" (a compile-cache
    # tree for option.compiled_graph_path=s3://..., served next to the original weights).
    layout: Literal["neuronx-tnx", "neuronx-legacy", "neuronx-split", "neuronx-optimum", "neuronx-cache"] = (
        "neuronx-tnx")
    # What the compile step passes, exactly as DJL's TNX loader would: from_pretrained kwargs and
    # the NeuronConfig keys (only those DJL sets).
    tnx_kwargs: dict[str, Any] = Field(default_factory=dict)
    neuron_config: dict[str, Any] = Field(default_factory=dict)
    # With the optimum loader: the NeuronModelForCausalLM.from_pretrained export kwargs DJL's
    # OptimumModelLoader passes (compiler args + input shapes).
    optimum_kwargs: dict[str, Any] = Field(default_factory=dict)
    # The split layout (LMI 0.26/0.27) loads checkpoint/ with this transformers_neuronx sampling
    # class ("<module>.<class>"), chosen by model type.
    split_class: str | None = None

    def summary(self) -> dict[str, str]:
        return {"tp": str(self.tp), "pp": "1", "dtype": self.amp}


@dataclass(frozen=True)
class NeuronxRequest(TargetRequest):
    """The knobs only neuronx's build takes, beside ``PlanRequest``'s."""

    weight_inputs: ClassVar[bool] = False  # the NEFF compile reads the weights in the container

    n_positions: int | None = knob(flag="--n-positions", option="option.n_positions", panel=KNOBS_PANEL,
                                   follows="--max-batch-size")
    context_length_estimate: str | None = knob(flag="--context-length-estimate",
                                               option="option.context_length_estimate", panel=KNOBS_PANEL,
                                               follows="--n-positions")  # "256,512"
