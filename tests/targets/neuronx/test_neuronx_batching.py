"""The batching keys of a Neuron artifact's serving.properties, planned through the real planner and
read back the way each LMI Neuron release reads them (issue 21, findings 1, 2, 3, 6 and 7).

- Static builds say option.rolling_batch=disable (0.30+ reads an unset key as auto: rolling batch) and
  carry no option.max_rolling_batch_size (finding 1).
- The static batch is also the top-level batch_size, the number of requests DJL's server hands the
  model at once (finding 6).
- Rolling batch never writes option.batch_size: DJL refuses one > 1 beside rolling batch and sets
  TNX's batch from option.max_rolling_batch_size itself (finding 2).
"""

from __future__ import annotations

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.neuronx.batching import container_batching
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.layouts import LAYOUTS
from lmi_build.targets.neuronx.profiles import get_profile, load_profiles
from lmi_build.targets.neuronx.serving import choose_loader
from tests.fixtures_planning import Planner, valid_unless_unbuilt

LLAMA = "meta-llama--Llama-2-7b-hf"
MIXTRAL = "mistralai--Mixtral-8x7B-v0.1"
GPT2 = "openai-community--gpt2"
PROFILES = [p.name for p in load_profiles()]
P027, P028, P030 = "lmi-0.27.0-neuronx-sdk2.18.0", "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.30.0-neuronx-sdk2.20.1"


def _properties(plan: BuildPlan) -> dict[str, str]:
    """The artifact's serving.properties, as the packager writes it for this plan."""
    assert valid_unless_unbuilt(plan), [e.message for e in plan.errors]
    return serving_properties(plan, LAYOUTS[plan.knobs(NeuronxBuild).layout])


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("batch", [1, 4])
def test_static_build_says_disable_and_batches_requests_by_its_batch(plan_model: Planner, profile: str,
                                                                    batch: int) -> None:
    option = ("option.batch_size=4",) if batch > 1 else ()
    plan = plan_model("neuronx", LLAMA, tp="2", n_positions="1024", profile=profile, option=option)
    properties = _properties(plan)
    assert properties["option.rolling_batch"] == "disable"
    assert "option.max_rolling_batch_size" not in properties
    assert properties["option.batch_size"] == properties["batch_size"] == str(batch)
    reading = container_batching(properties, get_profile(profile))
    assert (reading.rolling, reading.neff_batch, reading.server_batch, reading.refusal) == (False, batch, batch, None)


def test_the_default_build_on_the_default_profile_is_static_as_030_reads_it(plan_model: Planner) -> None:
    """Finding 1: before, no option.rolling_batch and option.max_rolling_batch_size=32 were written,
    which 0.30 resolves to rolling batch (auto -> vllm from 12) with batch 32: no NEFF matches."""
    properties = _properties(plan_model("neuronx", LLAMA, tp="2"))
    unset = {k: v for k, v in properties.items() if k != "option.rolling_batch"}
    unset["option.max_rolling_batch_size"] = "32"
    before = container_batching(unset, get_profile(P030))
    assert (before.rolling_batch, before.neff_batch) == ("vllm", 32)
    now = container_batching(properties, get_profile(P030))
    assert (now.rolling_batch, now.neff_batch) == ("disable", 1)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("model", [LLAMA, MIXTRAL, GPT2])
def test_rolling_batch_never_writes_option_batch_size(plan_model: Planner, profile: str, model: str) -> None:
    plan = plan_model("neuronx", model, tp="8" if model == MIXTRAL else "2", n_positions="1024",
                      max_batch_size=4, profile=profile)
    properties = _properties(plan)
    assert "option.batch_size" not in properties and "batch_size" not in properties
    assert properties["option.max_rolling_batch_size"] == "4"
    reading = container_batching(properties, get_profile(profile))
    assert reading.rolling and reading.refusal is None
    assert reading.neff_batch == plan.knobs(NeuronxBuild).batch_size == 4


def test_djl_refuses_option_batch_size_beside_rolling_batch() -> None:
    written = {"engine": "Python", "option.rolling_batch": "tnx", "option.max_rolling_batch_size": "4",
               "option.batch_size": "4"}
    for profile in load_profiles():
        refusal = container_batching(written, profile).refusal
        assert refusal is not None and "option.batch_size=4" in refusal


def test_plan_refuses_option_batch_size_with_rolling_batch(plan_model: Planner) -> None:
    plan = plan_model("neuronx", MIXTRAL, tp="8", max_batch_size=4, option=("option.batch_size=4",))
    errors = {e.code: e.message for e in plan.errors}
    assert "option.batch_size=4" in errors["neuron_batch_rolling"]


def test_both_static_batch_keys_must_agree(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, tp="2", option=("option.batch_size=4", "batch_size=2"))
    assert "neuron_batch_size" in {e.code for e in plan.errors}
    top_level = plan_model("neuronx", LLAMA, tp="2", option=("batch_size=4",))
    assert top_level.knobs(NeuronxBuild).batch_size == 4
    assert _properties(top_level)["option.batch_size"] == "4"


@pytest.mark.parametrize(("profile", "rolling"), [("lmi-0.26.0-neuronx-sdk2.16.0", "disable"), (P027, "disable"),
                                                   (P028, "disable"), ("lmi-0.29.0-neuronx-sdk2.19.1", "disable"),
                                                   (P030, "tnx"), ("lmi-0.34.0-neuronx-sdk2.21.1", "tnx")])
def test_an_unset_rolling_batch_per_release(profile: str, rolling: str) -> None:
    """The table's claim "disabled by default for Transformers-NeuronX" holds up to 0.29 only."""
    reading = container_batching({"engine": "Python", "option.batch_size": "1"}, get_profile(profile))
    assert reading.rolling_batch == rolling
    # 0.27's recommender runs only without an engine, and then reads unset as auto (TNX's rolling batch).
    assert container_batching({}, get_profile(P027)).rolling_batch == "auto"


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(("model", "fields"), [
    ("facebook--opt-125m", {}), ("facebook--opt-125m", {"max_batch_size": 4}), (LLAMA, {}),
    (LLAMA, {"max_batch_size": 4}), ("mistralai--Mistral-7B-v0.1", {"max_batch_size": 1}),
    (LLAMA, {"quantize": "int8"}),
])
def test_the_written_properties_pick_the_planned_loader(plan_model: Planner, profile: str, model: str,
                                                        fields: dict[str, object]) -> None:
    """Finding 7: 0.27 switches to transformers-neuronx whenever option.load_in_8bit is present, even
    false (0.27.0-dlc tnx_properties.py:231-250): the loader DJL picks from the serving.properties
    the build writes is the one the plan compiled for."""
    plan = plan_model("neuronx", model, tp="2", n_positions="1024", profile=profile, **fields)
    properties = _properties(plan)
    assert "option.load_in_8bit" not in properties
    options = {key.removeprefix("option."): value for key, value in properties.items() if key.startswith("option.")}
    if options.get("quantize") == "static_int8":
        options["load_in_8bit"] = "true"  # DJL's set_quantize validator (0.26.0-dlc tnx_properties.py:150-154)
    rolling = container_batching(properties, get_profile(profile)).rolling
    loader = choose_loader(get_profile(profile), model_type=plan.spec.model_type, rolling=rolling, options=options)
    assert loader == plan.knobs(NeuronxBuild).loader


@pytest.mark.parametrize("size", [None, "4", "32"])
def test_auto_resolves_from_the_size_the_user_wrote(plan_model: Planner, size: str | None) -> None:
    """option.rolling_batch=auto is resolved by the LmiConfigRecommender before it sizes the batch
    (LmiConfigRecommender.java@0.30.0-dlc:36-44, 63-69): unsized auto is tnx, as DJL's own
    tiny-llama-rb-lcnc test writes it (prepare.py@0.30.0-dlc); lmi-build's default size 32 (>= 12) turned
    it into vllm before."""
    option = ("option.rolling_batch=auto",) + ((f"option.max_rolling_batch_size={size}",) if size else ())
    plan = plan_model("neuronx", LLAMA, tp="2", n_positions="1024", profile=P030, option=option)
    properties = _properties(plan)
    expected = container_batching({"option.rolling_batch": "auto",
                                   **({"option.max_rolling_batch_size": size} if size else {})}, get_profile(P030))
    assert properties["option.rolling_batch"] == expected.rolling_batch == ("vllm" if size == "32" else "tnx")
    assert container_batching(properties, get_profile(P030)).rolling_batch == expected.rolling_batch
