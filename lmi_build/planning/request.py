"""What a caller asks the planner for: the CLI flags, a properties file and the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from lmi_build.options.flag_keys import FLAG_KEYS
from lmi_build.types import TargetName


@dataclass(frozen=True)
class PlanRequest:
    """Inputs of ``make_plan``. ``None`` means "not given here": the value then comes from the
    properties file, the environment, the recipe or the LMI default, in that order."""

    target: TargetName
    model: str | None = None  # local dir, HF id, s3:// URL or demo:NAME; else option.model_id
    revision: str | None = None
    tp: str | None = None  # an int, or "max" (all devices of --instance-type)
    pp: int | None = None
    dtype: str | None = None
    quantize: str | None = None
    max_input_len: int | None = None
    max_output_len: int | None = None
    max_batch_size: int | None = None
    n_positions: str | None = None  # one total length, "4096" (option.n_positions is one int)
    context_length_estimate: str | None = None  # "256,512"
    trust_remote_code: bool = False
    option: tuple[str, ...] = ()  # raw "key=value" pairs from --option
    properties: Path | None = None
    instance_type: str | None = None
    gpu: str | None = None  # the serving GPU (name or SM, e.g. a10g, sm90): hardware rules at plan time
    profile: str | None = None  # trtllm container profile name
    strict: bool = False
    calib_data: Path | None = None
    allow_pickle: bool = False
    endpoint_url: str | None = None  # S3 endpoint of an s3:// model (None: AWS_ENDPOINT_URL, else AWS)
    env: Mapping[str, str] = field(default_factory=dict)

    def flag_options(self) -> dict[str, tuple[str, str]]:
        """The dedicated flags as option pairs: serving.properties key -> (value, flag)."""
        given: dict[str, object] = {
            "--tp": self.tp,
            "--pp": self.pp,
            "--dtype": self.dtype,
            "--quantize": self.quantize,
            "--max-input-len": self.max_input_len,
            "--max-output-len": self.max_output_len,
            "--max-batch-size": self.max_batch_size,
            "--n-positions": self.n_positions,
            "--context-length-estimate": self.context_length_estimate,
            "--revision": self.revision,
            "--trust-remote-code": "true" if self.trust_remote_code else None,  # a switch: only ever on
        }
        return {FLAG_KEYS[flag]: (str(value), flag) for flag, value in given.items() if value is not None}


# The fields a caller sets to shape a plan (the build commands' flags, a matrix build's keys):
# every field but what the plan is for (target), where it runs (env) and where an s3:// model is
# served from (endpoint_url, a property of the host, not of the build).
PLAN_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(PlanRequest) if f.name not in ("target", "env", "endpoint_url"))
