"""The one mapping between serving.properties and the neuronx target's typed options, each way: the options
its planner reads (``NeuronxOptions``, ``planning.context.read_options``) and the values it writes
(``NeuronxServing``, ``PlanContext.write_options``), each field named as its key (``option.<field>``), or
aliased where the key is top-level's twin (``batch_size`` is DJL's server batch, ``option.batch_size`` TNX's); and
the text a release's start-up and verify read (``NeuronxText``, ``planning.context.read_text``)."""

from pydantic import BaseModel, ConfigDict, Field

from lmi_build.planning.context import PlanContext


class NeuronxOptions(BaseModel):
    """The options the neuronx planner reads; None: unset (or unparsable: resolution made that a plan error)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", populate_by_name=True)

    model_id: str | None = None
    n_positions: int | None = None
    context_length_estimate: tuple[int, ...] | None = None
    rolling_batch: str | None = None
    max_rolling_batch_size: int | None = None
    batch_size: int | None = None  # top-level: the requests DJL's server batches per call
    max_dynamic_batch_size: int | None = None  # top-level: DJL's older name of batch_size
    option_batch_size: int | None = Field(None, alias="option.batch_size")  # the batch TNX compiles for
    max_input_len: int | None = None
    max_output_len: int | None = None
    cache_layout: str | None = None
    group_query_attention: str | None = None
    neuron_optimize_level: int | None = None
    enable_mixed_precision_accumulation: bool | None = None
    enable_saturate_infinity: bool | None = None
    speculative_draft_model: str | None = None
    unroll: int | None = None
    compiled_graph_path: str | None = None


class NeuronxServing(BaseModel):
    """Values the plan writes into serving.properties, in the order written; None: not written here."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    engine: str | None = None
    tensor_parallel_degree: int | None = None
    dtype: str | None = None
    n_positions: int | None = None
    quantize: str | None = None
    rolling_batch: str | None = None
    max_rolling_batch_size: int | None = None
    option_batch_size: int | None = Field(None, alias="option.batch_size")
    batch_size: int | None = None
    model_id: str | None = None  # only a compile-cache artifact names its model (the container fetches it)
    revision: str | None = None


class NeuronxText(BaseModel):
    """serving.properties text as a release reads it at start-up (``batching``, ``serving``, ``startup``) and
    verify compares it with the NEFFs (``layouts``), before any typing; None: absent."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    engine: str | None = None
    batch_size: str | None = None  # top-level: DJL's server batch
    option_batch_size: str | None = Field(None, alias="option.batch_size")  # TNX's
    rolling_batch: str | None = None
    max_rolling_batch_size: str | None = None
    tensor_parallel_degree: str | None = None
    n_positions: str | None = None
    context_length_estimate: str | None = None
    cache_layout: str | None = None
    neuron_optimize_level: str | None = None
    enable_mixed_precision_accumulation: str | None = None
    enable_saturate_infinity: str | None = None
    speculative_draft_model: str | None = None
    compiled_graph_path: str | None = None
    model_id: str | None = None


def withhold_static_batch(ctx: PlanContext) -> None:
    """Under rolling batch DJL sets the batch from max_rolling_batch_size (and refuses one > 1 beside it)."""
    ctx.withhold("option.batch_size")
    ctx.withhold("batch_size")


def withhold_rolling_batch(ctx: PlanContext) -> None:
    """A static batch writes no option.max_rolling_batch_size."""
    ctx.withhold("max_rolling_batch_size")
