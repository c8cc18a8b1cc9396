"""Environment variables -> serving.properties keys, as the LMI container translates them.

- ``OPTION_FOO_BAR`` -> ``option.foo_bar`` (lower-cased when the name is all upper case; the
  table's spelling wins, so ``OPTION_ENTRYPOINT`` -> ``option.entryPoint``); ``OPTION_ENGINE`` -> ``engine``.
- ``SERVING_FOO`` -> the top-level key ``foo`` (``SERVING_JOB_QUEUE_SIZE`` -> ``job_queue_size``),
  except the server's own variables (``SERVING_OPTS``, ``SERVING_LOAD_MODELS``, ...).
- ``HF_MODEL_ID``, ``HF_REVISION``, ``HF_TASK``, ``TENSOR_PARALLEL_DEGREE``,
  ``PIPELINE_PARALLEL_DEGREE``, ``DJL_ENTRY_POINT`` stand for an option when its ``OPTION_*``
  variable is unset.
- TGI / SageMaker variables (``SM_NUM_GPUS``, ``MAX_BATCH_SIZE``, ...) are translated to the LMI
  variable only when that LMI variable is unset.

Credentials (``HF_TOKEN``, AWS keys) are never turned into options and never echoed. An empty
variable counts as unset (CI templates often export ``FOO=""``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lmi_build.core.redaction import SECRET_ENV_VARS
from lmi_build.core.types import PlanMessage
from lmi_build.options.booleans import SPELLING as BOOL_SPELLING
from lmi_build.options.booleans import bool_text, parse_bool
from lmi_build.options.spec import canonical_key, option_spec

# SERVING_* variables that configure the server process, not the model.
SERVER_ENV_VARS = frozenset({"SERVING_OPTS", "SERVING_LOAD_MODELS", "SERVING_FAIL_FAST", "SERVING_FEATURES"})


@dataclass(frozen=True)
class Compat:
    """A TGI / SageMaker variable and the LMI variable it becomes when that one is unset."""

    name: str
    becomes: str
    # LMI variables it becomes instead, the first whose option the target's engine reads (the option
    # table's ``targets``): the same setting under another engine's key.
    becomes_where_read: tuple[str, ...] = ()
    invert_bool: bool = False

    def lmi_name(self, target: str) -> str:
        for name in self.becomes_where_read:
            key = env_key(name)
            spec = option_spec(key) if key is not None else None
            if spec is not None and spec.applies_to(target):
                return name
        return self.becomes


COMPAT: tuple[Compat, ...] = (
    Compat("HF_MODEL_QUANTIZE", "OPTION_QUANTIZE"),
    Compat("HF_MODEL_TRUST_REMOTE_CODE", "OPTION_TRUST_REMOTE_CODE"),
    Compat("SM_NUM_GPUS", "TENSOR_PARALLEL_DEGREE"),
    Compat("MAX_CONCURRENT_REQUESTS", "SERVING_JOB_QUEUE_SIZE"),
    Compat("MAX_BATCH_SIZE", "OPTION_MAX_ROLLING_BATCH_SIZE"),
    Compat("MAX_BATCH_PREFILL_TOKENS", "OPTION_MAX_ROLLING_BATCH_PREFILL_TOKENS"),
    Compat(
        "CUDA_MEMORY_FRACTION",
        "OPTION_GPU_MEMORY_UTILIZATION",
        becomes_where_read=("OPTION_KV_CACHE_FREE_GPU_MEM_FRACTION",),
    ),
    Compat("ENABLE_CUDA_GRAPHS", "OPTION_ENFORCE_EAGER", invert_bool=True),
)

# LMI variables that set an option when the option's own OPTION_* variable is unset.
FALLBACKS: tuple[tuple[str, str], ...] = (
    ("HF_MODEL_ID", "option.model_id"),
    ("HF_REVISION", "option.revision"),
    ("HF_TASK", "option.task"),
    ("TENSOR_PARALLEL_DEGREE", "option.tensor_parallel_degree"),
    ("PIPELINE_PARALLEL_DEGREE", "option.pipeline_parallel_degree"),
    ("DJL_ENTRY_POINT", "option.entryPoint"),
)


@dataclass(frozen=True)
class EnvOption:
    key: str
    value: str
    origin: str  # the variable the user set, e.g. "SM_NUM_GPUS" or "OPTION_TENSOR_PARALLEL_DEGREE"


@dataclass(frozen=True)
class EnvOptions:
    values: dict[str, EnvOption]
    errors: list[PlanMessage] = field(default_factory=list)
    warnings: list[PlanMessage] = field(default_factory=list)


def env_key(name: str) -> str | None:
    """The serving.properties key an ``OPTION_*`` / ``SERVING_*`` variable sets, or None."""
    for prefix, key_prefix in (("OPTION_", "option."), ("SERVING_", "")):
        if not name.startswith(prefix) or name in SERVER_ENV_VARS:
            continue
        suffix = name[len(prefix) :]
        if not suffix:
            return None
        if suffix == "ENGINE":
            return "engine"
        if suffix == suffix.upper():
            suffix = suffix.lower()
        return canonical_key(key_prefix + suffix)
    return None


def translate_env(env: Mapping[str, str], *, target: str) -> EnvOptions:
    """The options an environment sets, each with the variable it came from."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    # name -> (value, the variable the user actually set)
    lmi: dict[str, tuple[str, str]] = {
        name: (value, name) for name, value in env.items() if value != "" and name not in SECRET_ENV_VARS
    }
    for compat in COMPAT:
        if compat.name not in lmi:
            continue
        value, origin = lmi.pop(compat.name)
        lmi_name = compat.lmi_name(target)
        if lmi_name in lmi:
            continue  # the LMI variable is set: the compatibility variable is ignored
        if compat.invert_bool:
            parsed = parse_bool(value)
            if parsed is None:
                errors.append(
                    PlanMessage(
                        code="invalid_value",
                        message=f"{compat.name}={value}: expected {BOOL_SPELLING}",
                        hint=f"set {compat.name}={BOOL_SPELLING}, or {lmi_name} directly",
                    )
                )
                continue
            value = bool_text(not parsed)
        lmi[lmi_name] = (value, origin)

    # OPTION_* first, then other LMI names, then the fallbacks: the first of each key wins.
    direct = [(name, key) for name in sorted(lmi, key=lambda n: (not n.startswith("OPTION_"), n))
              if (key := env_key(name)) is not None]
    fallbacks = [(name, key) for name, key in FALLBACKS if name in lmi]
    values: dict[str, EnvOption] = {}
    for name, key in direct + fallbacks:
        value, origin = lmi[name]
        if key in values:
            _conflict(warnings, values[key], EnvOption(key, value, origin))
            continue
        values[key] = EnvOption(key, value, origin)
    return EnvOptions(values=values, errors=errors, warnings=warnings)


def _conflict(warnings: list[PlanMessage], kept: EnvOption, ignored: EnvOption) -> None:
    if kept.value == ignored.value:
        return
    warnings.append(
        PlanMessage(
            code="env_conflict",
            message=f"{kept.origin} and {ignored.origin} both set {kept.key}; {kept.origin} wins "
            f"and {ignored.origin} is ignored",
            hint=f"unset {ignored.origin}",
        )
    )
