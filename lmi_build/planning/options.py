"""The one mapping between serving.properties and the options every target shares (the targets' own are in
``targets/<name>/options.py``), each way: fields named as their keys and typed as the option table parses
them, read with ``planning.context.read_options`` / ``read_written`` / ``read_text`` and written with
``PlanContext.write_options``. Nothing outside these modules reads or writes an option by its key
(tests/targets/trtllm/test_trtllm_typed_knobs.py)."""

from pydantic import ConfigDict

from lmi_build.core.types import Record


class CommonOptions(Record):
    """The shared options the planner, the quantization plan and the build read; None: unset (or unparsable:
    resolution made that a plan error)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)

    dtype: str | None = None
    quantize: str | None = None
    tensor_parallel_degree: int | str | None = None  # an int, or "max"
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


class CommonServing(Record):
    """Shared values the planner writes into serving.properties; None: not written here."""

    tensor_parallel_degree: int | None = None


class CommonText(Record):
    """Shared options as written, before any typing (``read_text``); None: absent or empty. The trust check
    compares the text itself, and a "set together" check counts a value that did not parse as set."""

    trust_remote_code: str | None = None
    rotary_scaling_type: str | None = None
    rotary_scaling_factor: str | None = None
