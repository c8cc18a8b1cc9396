"""Per-profile Neuron planning: the loader DJL picks, the TNX kwargs and NeuronConfig the compile
step passes, the speculative-draft flag duplication, and the known NEFF cache suffixes."""

from __future__ import annotations

import hashlib

import pytest

from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.serving import LoaderRefused, choose_loader, compiler_flags
from tests.fixtures_planning import Planner, codes, valid_unless_unbuilt

LLAMA = "meta-llama--Llama-2-7b-hf"
OPT = "facebook--opt-125m"
FALCON = "tiiuae--falcon-7b"
CONTAINER = "--logfile /tmp/compile.log --temp-dir=/tmp"
P026, P027, P030 = "lmi-0.26.0-neuronx-sdk2.16.0", "lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.30.0-neuronx-sdk2.20.1"


def _md5_8(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()[:8]


P028, P033 = "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.33.0-neuronx-sdk2.21.1"


@pytest.mark.parametrize(
    ("profile", "model_type", "rolling", "options", "expected"),
    [
        (P030, "opt", False, {}, "tnx"),  # 0.28+: TNX unless option.model_loader says otherwise
        (P028, "llama", True, {}, "tnx"),  # 0.28.0-dlc transformers_neuronx.py:50
        (P026, "llama", False, {}, "optimum"),  # 0.26: optimum unless rolling batch ...
        (P026, "llama", True, {}, "tnx"),
        (P026, "mistral", False, {}, "tnx"),  # ... or a model type outside 0.26's optimum list
        (P026, "opt", False, {"load_split_model": "true"}, "tnx"),  # ... or load_split_model/load_in_8bit true
        (P026, "opt", False, {"load_split_model": "false"}, "optimum"),
        (P027, "opt", True, {}, "optimum"),  # 0.27: optimum's model types
        (P027, "falcon", True, {}, "tnx"),  # outside optimum's model types
        (P027, "llama", False, {}, "tnx"),  # llama/mistral without rolling batch
        (P027, "llama", True, {}, "optimum"),
        (P027, "opt", False, {"context_length_estimate": "256"}, "tnx"),  # a TNX-only option, set to anything
        (P027, "opt", False, {"model_loader": "tnx"}, "tnx"),  # explicit
        (P027, "llama", True, {"partition_schema": "legacy"}, "tnx"),  # a non-optimum schema picks TNX
        (P030, "llama", True, {"partition_schema": "optimum"}, "optimum"),
        (P030, "llama", True, {"model_loader": "optimum", "partition_schema": "optimum"}, "optimum"),
        (P030, "llama", True, {"model_loader": "vllm"}, "vllm"),
        (P033, "llama", True, {"model_loader": "nxdi"}, "nxdi"),
    ],
)
def test_loader_rules(profile: str, model_type: str, rolling: bool, options: dict[str, str], expected: str) -> None:
    assert choose_loader(get_profile(profile), model_type=model_type, rolling=rolling, options=options) == expected


@pytest.mark.parametrize(
    ("profile", "model_type", "rolling", "options", "refusal"),
    [
        (P030, "llama", True, {"model_loader": "nxdi"}, "no option.model_loader=nxdi"),  # nxdi from 0.32
        (P026, "llama", True, {"model_loader": "tnx"}, "no option.model_loader=tnx"),  # 0.26 has none
        (P030, "llama", True, {"model_loader": "optimum"}, "without option.partition_schema=optimum"),
        (P030, "falcon", True, {"model_loader": "optimum", "partition_schema": "optimum"}, "does not support falcon"),
        (P030, "llama", False, {"model_loader": "optimum", "partition_schema": "optimum"}, "without rolling batch"),
        (P027, "llama", True, {"model_loader": "tnx", "partition_schema": "optimum"}, "partition_schema=optimum"),
        (P027, "llama", True, {"model_loader": "optimum", "partition_schema": "legacy"}, "partition_schema=legacy"),
    ],
)
def test_loader_refusals_are_djls(profile: str, model_type: str, rolling: bool, options: dict[str, str],
                                  refusal: str) -> None:
    with pytest.raises(LoaderRefused, match=refusal):
        choose_loader(get_profile(profile), model_type=model_type, rolling=rolling, options=options)


def test_plan_refuses_a_model_loader_djl_refuses(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, tp="2", profile=P030, option=("option.model_loader=nxdi",))
    assert any(message.code == "neuron_model_loader" for message in plan.errors)


def test_int8_forces_tnx_on_026(plan_model: Planner) -> None:
    assert _build(plan_model("neuronx", OPT, profile=P026)).loader == "optimum"
    assert _build(plan_model("neuronx", OPT, profile=P026, quantize="int8")).loader == "tnx"


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
    assert _build(plan).compiler_flags.count("-O2") == 2  # what verify computes for such serving.properties
    assert "neuron_refused_option" in codes(plan)  # the driver builds no speculation kernels (finding 11)


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
    # rolling_batch=vllm with model_loader unset keeps DJL's TNXModelLoader (load_unwrapped_model,
    # 0.32.0-dlc transformers_neuronx.py:66,111-150,316-329): the same precompiled layout.
    assert _build(vllm).loader == "tnx" and vllm.options["option.rolling_batch"] == "vllm"
    small = plan_model("neuronx", LLAMA, tp="2", max_batch_size=8, profile=p033)
    assert _build(small).loader == "tnx" and small.options["option.rolling_batch"] == "tnx"
    # 0.30 resolves auto the same way (0.30.0-dlc LmiConfigRecommender.java:63-69; its image has the
    # vllm 0.6.2 wheel, pytorch-inf2.Dockerfile:32).
    on_030 = plan_model("neuronx", LLAMA, tp="2", max_batch_size=16, profile=P030)
    assert _build(on_030).loader == "tnx" and on_030.options["option.rolling_batch"] == "vllm"
    # A top-level batch_size > 1 turns rolling batch off (LmiConfigRecommender.java:52-55).
    static = plan_model("neuronx", LLAMA, tp="2", option=("option.rolling_batch=auto", "batch_size=4"))
    assert static.options["option.rolling_batch"] == "disable" and static.valid, static.errors
    assert _build(static).batch_size == 4 and not _build(static).continuous_batching
    assert (static.options["option.batch_size"], static.options["batch_size"]) == ("4", "4")
    # option.batch_size is not that key: DJL keeps rolling batch and refuses the pair (tnx_properties.py:164-178).
    refused = plan_model("neuronx", LLAMA, tp="2", option=("option.rolling_batch=auto", "option.batch_size=4"))
    assert "neuron_batch_rolling" in {e.code for e in refused.errors}


def test_continuous_batching_contexts_per_release(plan_model: Planner) -> None:
    """0.28/0.29 compile one context bucket [n_positions] under continuous batching, 0.30+ a bucket
    list; 0.26-0.28 refuse a given list other than [n_positions] (model_loader.py per release)."""
    on_028 = _build(plan_model("neuronx", LLAMA, tp="2", n_positions="4096", max_batch_size=4, profile=P028))
    assert on_028.continuous_batching and on_028.tnx_kwargs["context_length_estimate"] == [4096]
    on_030 = _build(plan_model("neuronx", LLAMA, tp="2", n_positions="4096", max_batch_size=4, profile=P030))
    assert on_030.tnx_kwargs["context_length_estimate"] == [128, 1024, 2048, 4096]
    given = _build(plan_model("neuronx", LLAMA, tp="2", n_positions="4096", max_batch_size=4, profile=P030,
                              context_length_estimate="2048,1024"))
    assert given.tnx_kwargs["context_length_estimate"] == [2048, 1024]  # DJL's parsed list, as given
    refused = plan_model("neuronx", LLAMA, tp="2", n_positions="4096", max_batch_size=4, profile=P027,
                         context_length_estimate="1024,2048")
    assert any("must be exactly [4096]" in e.message for e in refused.errors)
    # 0.26 batches continuously whenever rolling batch is on, 0.28+ only from two sequences.
    assert _build(plan_model("neuronx", OPT, tp="1", max_batch_size=4, profile=P026)).continuous_batching
    assert not _build(plan_model("neuronx", LLAMA, tp="2", max_batch_size=1, profile=P028)).continuous_batching


# (fixture, its config.json max_position_embeddings)
N_POSITIONS_MODELS = [(LLAMA, 4096), ("huggyllama--llama-7b", 2048), ("mistralai--Mistral-7B-v0.1", 32768)]


@pytest.mark.parametrize("profile", [p.name for p in load_profiles()])
@pytest.mark.parametrize(("model", "max_positions"), N_POSITIONS_MODELS)
def test_default_n_positions_is_what_the_release_resolves(plan_model: Planner, profile: str, model: str,
                                                          max_positions: int) -> None:
    """Without option.n_positions, 0.26-0.29 compile for TnXProperties' default 128 (tnx_properties.py
    n_positions: int = 128), 0.30+ for DJL's smart default min(max_position_embeddings, 4096)
    (NeuronSmartDefaultUtils.java:55-63, LmiUtils.java getDefaultNPositions): the plan writes that value."""
    plan = plan_model("neuronx", model, tp="2", profile=profile)
    assert valid_unless_unbuilt(plan), [e.message for e in plan.errors]
    lmi = tuple(int(part) for part in get_profile(profile).lmi_version.split("."))
    expected = 128 if lmi < (0, 30, 0) else min(max_positions, 4096)
    assert plan.options["option.n_positions"] == str(expected)
    assert max(plan.knobs(NeuronxBuild).n_positions) == expected
    assert get_profile(profile).n_positions_default_sources
