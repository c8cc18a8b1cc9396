"""The one mapping between serving.properties and the options more than one target shares (the targets' own are
in ``targets/<name>/options.py``, whose models inherit these), each way: fields named as their keys and typed as
the option table parses them, read with ``planning.context.read_options`` / ``read_written`` / ``read_text`` and
written with ``PlanContext.write_options``. Nothing outside these modules reads or writes an option by its key
(tests/targets/trtllm/test_trtllm_typed_knobs.py)."""

from pydantic import ConfigDict

from lmi_build.core.types import Record


class CommonOptions(Record):
    """The options more than one target reads or writes, each field named as its key and typed as the option
    table parses it: read typed (``read_options``), as the user set them (``PlanContext.user_options``), as
    text (``read_text``: a container's start-up types them its own way), and written (``write_options``, the
    fields set, in field order). A target's options model inherits these and adds its own. None: unset (or
    unparsable: resolution made that a plan error), or not written."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True, populate_by_name=True)

    # In the order a plan writes them (``write_options`` writes one model's fields in field order).
    engine: str | None = None
    rolling_batch: str | None = None
    mpi_mode: bool | None = None
    pipeline_parallel_size: int | None = None
    tensor_parallel_degree: int | str | None = None  # an int, or "max"
    pipeline_parallel_degree: int | None = None
    dtype: str | None = None
    max_input_len: int | None = None
    max_output_len: int | None = None
    max_rolling_batch_size: int | None = None
    quantize: str | None = None
    trust_remote_code: bool | None = None
    rotary_scaling_type: str | None = None
    rotary_scaling_factor: float | None = None
    smoothquant_alpha: float | None = None
    smoothquant_per_token: bool | None = None
    smoothquant_per_channel: bool | None = None
    multi_query_mode: bool | None = None
    calib_size: int | None = None
    awq_calib_size: int | None = None
    calib_max_seq_len: int | None = None
    calib_batch_size: int | None = None
    calib_seed: int | None = None
    kv_cache_dtype: str | None = None
