"""The one mapping between serving.properties and the neuronx target's typed options, each way:
``NeuronxOptions``, each field named as its key (``option.<field>``), or aliased where the key is top-level's
twin (``batch_size`` is DJL's server batch, ``option.batch_size`` TNX's), read typed
(``planning.context.read_options``), written (``PlanContext.write_options``) and read as the text a release's
start-up and verify read (``planning.context.read_text``)."""

from pydantic import Field

from lmi_build.planning.context import PlanContext
from lmi_build.planning.options import CommonOptions


class NeuronxOptions(CommonOptions):
    """The options the neuronx target reads (its planner, its release's start-up and verify as text) and
    writes, the shared ones inherited; None: unset (or unparsable: resolution made that a plan error), or not
    written."""

    n_positions: int | None = None
    option_batch_size: int | None = Field(None, alias="option.batch_size")  # the batch TNX compiles for
    batch_size: int | None = None  # top-level: the requests DJL's server batches per call
    max_dynamic_batch_size: int | None = None  # top-level: DJL's older name of batch_size
    model_id: str | None = None  # written only by a compile-cache artifact (the container fetches its model)
    revision: str | None = None
    context_length_estimate: tuple[int, ...] | None = None
    cache_layout: str | None = None
    group_query_attention: str | None = None
    neuron_optimize_level: int | None = None
    enable_mixed_precision_accumulation: bool | None = None
    enable_saturate_infinity: bool | None = None
    speculative_draft_model: str | None = None
    unroll: int | None = None
    compiled_graph_path: str | None = None


def withhold_static_batch(ctx: PlanContext) -> None:
    """Under rolling batch DJL sets the batch from max_rolling_batch_size (and refuses one > 1 beside it)."""
    ctx.withhold("option.batch_size")
    ctx.withhold("batch_size")


def withhold_rolling_batch(ctx: PlanContext) -> None:
    """A static batch writes no option.max_rolling_batch_size."""
    ctx.withhold("max_rolling_batch_size")
