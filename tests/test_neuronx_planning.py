"""Per-profile Neuron planning: the loader DJL picks, the TNX kwargs and NeuronConfig the compile
step passes, the speculative-draft flag duplication, and the known NEFF cache suffixes."""

from __future__ import annotations

import hashlib

import pytest

from lmi_build.planning.plan import NeuronxBuild
from lmi_build.targets.neuronx.plan import choose_loader, compiler_flags
from lmi_build.targets.neuronx.profiles import get_profile
from tests.fixtures_planning import Planner

LLAMA = "meta-llama--Llama-2-7b-hf"
OPT = "facebook--opt-125m"
FALCON = "tiiuae--falcon-7b"
CONTAINER = "--logfile /tmp/compile.log --temp-dir=/tmp"
P026, P027, P030 = "lmi-0.26.0-neuronx-sdk2.16.0", "lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.30.0-neuronx-sdk2.20.1"


def _md5_8(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("profile", "model_type", "rolling", "options", "expected"),
    [
        (P030, "opt", False, set(), "tnx"),  # 0.30+: TNX always
        (P026, "llama", False, set(), "optimum"),  # 0.26: optimum unless rolling batch
        (P026, "llama", True, set(), "tnx"),
        (P027, "opt", True, set(), "optimum"),  # 0.27: optimum's model types
        (P027, "falcon", True, set(), "tnx"),  # outside optimum's model types
        (P027, "llama", False, set(), "tnx"),  # llama/mistral without rolling batch
        (P027, "llama", True, set(), "optimum"),
        (P027, "opt", False, {"context_length_estimate"}, "tnx"),  # a TNX-only option
    ],
)
def test_loader_rules(profile: str, model_type: str, rolling: bool, options: set[str], expected: str) -> None:
    assert choose_loader(get_profile(profile), model_type=model_type, rolling=rolling, set_options=options) == expected


def test_plan_records_the_loader_per_profile(plan_model: Planner) -> None:
    assert _build(plan_model("neuronx", OPT, profile=P027)).loader == "optimum"
    assert _build(plan_model("neuronx", OPT, profile=P030)).loader == "tnx"


def test_tnx_kwargs_and_neuron_config_are_djls(plan_model: Planner) -> None:
    build = _build(plan_model("neuronx", LLAMA, tp="2", n_positions="4096", context_length_estimate="256,512,1024,2048"))
    assert build.tnx_kwargs == {"batch_size": 1, "amp": "f16", "tp_degree": 2, "n_positions": 4096,
                                "context_length_estimate": [256, 512, 1024, 2048]}
    assert build.neuron_config == {"on_device_embedding": True}
    # Without --context-length-estimate DJL passes none: TNX derives the buckets itself.
    assert "context_length_estimate" not in _build(plan_model("neuronx", LLAMA, tp="2")).tnx_kwargs


def test_continuous_batching_kwargs(plan_model: Planner) -> None:
    build = _build(plan_model("neuronx", LLAMA, tp="2", n_positions="4096", max_batch_size=4))
    assert build.continuous_batching
    assert build.tnx_kwargs["n_positions"] == [4096]
    assert build.tnx_kwargs["context_length_estimate"] == [128, 1024, 2048, 4096]
    assert build.neuron_config["continuous_batching"] == {"batch_size_for_shared_caches": 4}


def test_gqa_is_passed_only_when_set(plan_model: Planner) -> None:
    build = _build(plan_model("neuronx", LLAMA, tp="2", option=("option.group_query_attention=shard-over-batch",)))
    assert build.neuron_config["group_query_attention"] == "shard-over-batch"
    assert build.gqa_effective == "shard-over-heads"  # batch 1 % tp 2


def test_speculative_draft_appends_the_flags_twice(plan_model: Planner) -> None:
    flags = compiler_flags(CONTAINER, 2, True, False, properties_built=2)
    assert flags == (f"{CONTAINER} -O2 --enable-mixed-precision-accumulation -O2 "
                     "--enable-mixed-precision-accumulation --model-type=transformer --auto-cast=none")
    plan = plan_model("neuronx", LLAMA, tp="2", option=("option.neuron_optimize_level=2",
                                                          "option.speculative_draft_model=/opt/ml/draft"))
    assert _build(plan).compiler_flags.count("-O2") == 2


def test_known_cache_suffixes() -> None:
    # The 8 hex after MODULE_<hash>+ in the Neuron compile cache: md5 of the flags string (facts §5).
    assert _md5_8(compiler_flags(CONTAINER, None, False, False)) == "ede6753c"  # the LMI container
    assert _md5_8(compiler_flags("", None, False, False)) == "2c2d707e"  # TNX alone, NEURON_CC_FLAGS unset
    assert _md5_8("") == "d41d8cd9"  # a compile with no flags at all (not a TNX compile)


def _build(plan: object) -> NeuronxBuild:
    build = getattr(plan, "build", None)
    assert isinstance(build, NeuronxBuild), getattr(plan, "errors", plan)
    return build


def test_rolling_batch_auto_resolution(plan_model: Planner) -> None:
    p033 = "lmi-0.33.0-neuronx-sdk2.21.1"
    vllm = plan_model("neuronx", LLAMA, tp="2", max_batch_size=16, profile=p033)
    assert _build(vllm).loader == "vllm" and vllm.options["option.rolling_batch"] == "vllm"
    small = plan_model("neuronx", LLAMA, tp="2", max_batch_size=8, profile=p033)
    assert _build(small).loader == "tnx" and small.options["option.rolling_batch"] == "tnx"
    # 0.30's image has no vllm-neuronx: TNX continuous batching.
    assert _build(plan_model("neuronx", LLAMA, tp="2", max_batch_size=16, profile=P030)).loader == "tnx"
    # A static batch size > 1 turns rolling batch off.
    static = plan_model("neuronx", LLAMA, tp="2", option=("option.rolling_batch=auto", "option.batch_size=4"))
    assert static.options["option.rolling_batch"] == "disable"
    assert _build(static).batch_size == 4 and not _build(static).continuous_batching
