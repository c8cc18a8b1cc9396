"""How an LMI Neuron release reads the batching keys of serving.properties: ``option.rolling_batch``,
``option.max_rolling_batch_size``, ``option.batch_size`` and the top-level ``batch_size``.

One reading, used by ``plan`` (what the artifact's serving.properties must say) and ``verify`` (what
the container makes of the serving.properties an artifact has). The rules per release are the
profile's data (``rolling_batch_recommender``, ``auto_rolling_batch_vllm_from``, cited in
``rolling_batch_sources``); the rules shared by every release (0.26-0.34, lines per release in each
profile's ``rolling_batch_sources``):

- The top-level ``batch_size`` is the number of requests DJL's server hands the model at once
  (djl-serving 0.30.0-dlc ModelInfo.java:864-867, BatchAggregator.java:54; default 1,
  WlmConfigManager.java:20); ``option.*`` keys are what the Python side reads (ModelInfo.java:589-595).
- transformers-neuronx compiles and loads for ``option.batch_size`` (default 1, properties.py:56), or
  under rolling batch for ``option.max_rolling_batch_size`` (transformers_neuronx.py:166-168;
  default 32, properties.py:57), and pads a static batch up to it (transformers_neuronx.py:409-416).
- DJL refuses ``option.batch_size`` > 1 with rolling batch on (tnx_properties.py:164-178).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from lmi_build.planning.context import OptionText, read_text
from lmi_build.targets.neuronx.options import NeuronxOptions

if TYPE_CHECKING:
    from lmi_build.targets.neuronx.profiles import NeuronProfile

PYTHON_MAX_ROLLING_BATCH = 32  # properties.py:57 (0.30.0-dlc), the same in 0.26-0.34
VLLM_MAX_ROLLING_BATCH = 256  # LmiConfigRecommender.java setRollingBatchSize (0.28.0-dlc:162-181)


@dataclass(frozen=True)
class ContainerBatching:
    """What one release makes of a serving.properties' batching keys."""

    profile: str
    rolling_batch: str  # as resolved: "disable", "tnx", "vllm" or "auto" (0.26/0.27: TNX's own rolling batch)
    neff_batch: int | None  # the batch transformers-neuronx compiles/loads for; None: chosen at start-up
    server_batch: int  # requests the server hands the model per call (top-level batch_size)
    refusal: str | None  # DJL's start-up refusal of these keys
    why: str  # how rolling_batch was resolved, for messages (without the release's name)

    @property
    def rolling(self) -> bool:
        return self.rolling_batch != "disable"


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None and value.strip() else default
    except ValueError:
        return default


def container_batching(properties: Mapping[str, str], profile: NeuronProfile) -> ContainerBatching:
    """The batching ``profile``'s release resolves from ``properties`` (full serving.properties keys)."""
    rule = profile.rolling_batch_recommender
    text = read_text(properties, NeuronxOptions)
    server_batch = _int(text.batch_size, 1)
    recommender = rule in ("tnx_disable", "auto") or (rule == "without_engine" and not text.engine)
    if recommender:
        rolling, why = _recommended_rolling_batch(text, profile, server_batch)
    else:
        rolling = text.rolling_batch or "disable"
        why = (f"option.rolling_batch={text.rolling_batch}" if text.rolling_batch else
               "no option.rolling_batch: the Python default, disable")
    option_batch = _int(text.option_batch_size, 1)
    refusal = None
    if recommender and rolling in profile.mpi_rolling_batch:
        refusal = (f"the LmiConfigRecommender sets option.mpi_mode=true for option.rolling_batch={rolling}, and the "
                   "MPI path counts GPUs, of which a Neuron host has none: \"GPU devices are not enough to run N "
                   f"partitions\" ({'; '.join(profile.mpi_sources)})")
    elif rolling != "disable" and option_batch > 1:
        refusal = (f"DJL refuses option.batch_size={option_batch} with rolling batch ({why}): \"Dynamic batching "
                   "and rolling batch cannot be enabled at the same time\" (tnx_properties.py validate_batch_size)")
    neff_batch = option_batch if rolling == "disable" else _rolling_neff_batch(text.max_rolling_batch_size, rule, rolling)
    return ContainerBatching(profile=profile.name, rolling_batch=rolling, neff_batch=neff_batch,
                             server_batch=server_batch, refusal=refusal, why=why)


def _recommended_rolling_batch(text: OptionText[NeuronxOptions], profile: NeuronProfile, server_batch: int) -> tuple[str, str]:
    """(option.rolling_batch, why) as the release's LmiConfigRecommender resolves it."""
    rule, given = profile.rolling_batch_recommender, text.rolling_batch
    if server_batch > 1:
        return "disable", f"batch_size={server_batch} > 1: the LmiConfigRecommender turns rolling batch off"
    rolling = given or ("disable" if rule == "tnx_disable" else "auto")
    why = (f"option.rolling_batch={given}" if given else
           f"no option.rolling_batch: the LmiConfigRecommender reads it as {rolling}")
    if rolling in profile.rolling_batch_renamed:
        rolling = profile.rolling_batch_renamed[rolling]
        why += f", which it rewrites to {rolling}"
    if rolling == "auto" and rule in ("tnx_disable", "auto"):
        written = _int(text.max_rolling_batch_size, 1)
        vllm_from = profile.auto_rolling_batch_vllm_from
        rolling = "vllm" if vllm_from is not None and written >= vllm_from else "tnx"
        why += f", which it resolves to {rolling}" + (
            f" (option.max_rolling_batch_size {written} >= {vllm_from})" if rolling == "vllm" else "")
    return rolling, why


def _rolling_neff_batch(max_rolling: str | None, rule: str, rolling: str) -> int | None:
    """The batch transformers-neuronx compiles for under rolling batch; None: chosen at start-up."""
    if max_rolling is not None:
        return _int(max_rolling, PYTHON_MAX_ROLLING_BATCH)
    if rule == "auto":
        return None  # the smart defaults size it from the NeuronCores found, else setRollingBatchSize
    if rule == "tnx_disable" and rolling == "vllm":
        return VLLM_MAX_ROLLING_BATCH  # setRollingBatchSize
    return PYTHON_MAX_ROLLING_BATCH


def batching_problems(properties: Mapping[str, str], built_batch: int,
                      releases: Sequence[NeuronProfile]) -> list[str]:
    """Why NEFFs compiled for ``built_batch`` would not be served as built under ``properties`` by
    each of ``releases``: one message per distinct reading, naming the releases that read it so."""
    found: dict[str, list[str]] = {}
    for profile in releases:
        problem = batching_problem(container_batching(properties, profile), built_batch)
        if problem is not None:
            found.setdefault(problem[1], []).append(profile.lmi_version)
    return [f"{problem} (LMI {', '.join(versions)})" for problem, versions in found.items()]


BatchingKind = Literal["refused", "neff_batch", "server_batch"]


def batching_problem(reading: ContainerBatching, built: int) -> tuple[BatchingKind, str] | None:
    """What is wrong with NEFFs compiled for ``built`` under this reading, and its kind: DJL's own
    refusal of the keys ("refused"), NEFFs for another batch than TNX loads ("neff_batch"), or
    a server batch other than the NEFFs' ("server_batch": it loads, one request a pass)."""
    if reading.refusal is not None:
        return "refused", reading.refusal
    how = f"rolling batch: {reading.why}" if reading.rolling else f"static batch: {reading.why}"
    if reading.neff_batch is None:
        return "neff_batch", (f"neuron block batch_size={built}, serving.properties has no "
                              f"option.max_rolling_batch_size ({how}): the container picks the batch at start-up")
    if reading.neff_batch != built:
        key = "option.max_rolling_batch_size" if reading.rolling else "option.batch_size"
        return "neff_batch", f"neuron block batch_size={built}, serving.properties {key}={reading.neff_batch} ({how})"
    if not reading.rolling and reading.server_batch != built:
        return "server_batch", (f"serving.properties batch_size={reading.server_batch}: DJL hands the model "
                                f"{reading.server_batch} request(s) at once, the NEFFs are compiled for {built} "
                                "(ModelInfo.java:864-867)")
    return None
