"""tp that does not divide the attention heads (issue 21 finding 4): transformers-neuronx pads the
heads of the models built on its padded decoder, so the plan warns instead of refusing; it keeps
refusing what TNX refuses (GPT-J/GPT-NeoX heads, Mixtral experts). Cases from DJL's own settings:
the AOT tutorial's Llama-2-70B at tp 24 on inf2.48xlarge, its tests' Llama-2-13B at tp 12 on
inf2.24xlarge, and Llama-3.2-3B over all 32 cores of a trn1.32xlarge."""

from __future__ import annotations

import pytest

from lmi_build.targets.neuronx.knobs import NeuronxBuild
from tests.fixtures_planning import ModelDirFactory, Planner, codes, warning_codes

LLAMA = "meta-llama--Llama-2-7b-hf"
LLAMA_13B = "microsoft--Orca-2-13b"  # Llama-2-13B's shape: 40 heads
LLAMA_70B = {"hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 80,
             "intermediate_size": 28672}
LLAMA_32_3B = {"hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8, "num_hidden_layers": 28,
               "intermediate_size": 8192}


@pytest.mark.parametrize(("model", "overrides", "tp", "instance", "padded"), [
    (LLAMA, LLAMA_70B, "24", "inf2.48xlarge", "to 72 for tp=24"),  # tnx_aot_tutorial.md:59
    (LLAMA_13B, {}, "12", "inf2.24xlarge", "to 48 for tp=12"),  # prepare.py:218-236
    (LLAMA, LLAMA_32_3B, "32", "trn1.32xlarge", "to 32 for tp=32"),
    ("bigscience--bloom-560m", {}, "12", "inf2.24xlarge", "16 attention heads to 24"),
    ("openai-community--gpt2", {}, "8", "inf2.24xlarge", "12 attention heads to 16"),
])
def test_padded_heads_plan_valid_per_instance(plan_model: Planner, model_dir: ModelDirFactory, model: str,
                                              overrides: dict[str, int], tp: str, instance: str, padded: str) -> None:
    path = model_dir(model, dirname=f"{model}-{tp}", **overrides)
    plan = plan_model("neuronx", path, tp=tp, n_positions="1024", instance_type=instance)
    assert plan.valid, [e.message for e in plan.errors]
    assert isinstance(plan.build, NeuronxBuild) and plan.build.tp == int(tp)
    warning = next(w for w in plan.warnings if w.code == "tp_heads_padded")
    assert padded in warning.message


def test_tp_max_on_inf2_48xlarge_pads_llama_2_7b(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, tp="max", instance_type="inf2.48xlarge")
    assert isinstance(plan.build, NeuronxBuild) and plan.build.tp == 24
    assert plan.valid and "tp_heads_padded" in warning_codes(plan)


@pytest.mark.parametrize(("model", "tp"), [("EleutherAI--gpt-j-6b", "12"),
                                           ("togethercomputer--RedPajama-INCITE-7B-Base", "24")])
def test_models_without_head_padding_are_still_refused(plan_model: Planner, model: str, tp: str) -> None:
    plan = plan_model("neuronx", model, tp=tp, n_positions="1024")
    assert "tp_heads" in codes(plan)


def test_mixtral_tp_must_divide_or_be_a_multiple_of_the_experts(plan_model: Planner) -> None:
    refused = plan_model("neuronx", "mistralai--Mixtral-8x7B-v0.1", tp="12", n_positions="1024")
    assert "tp_experts" in codes(refused) and "tp_heads" not in codes(refused)
    padded = plan_model("neuronx", "mistralai--Mixtral-8x7B-v0.1", tp="24", n_positions="1024")
    assert padded.valid and "tp_heads_padded" in warning_codes(padded)


def test_tp_12_is_a_neuron_degree_on_inf2_only(plan_model: Planner) -> None:
    assert "tp_neuron_degree" not in codes(plan_model("neuronx", LLAMA, tp="12", instance_type="inf2.24xlarge"))
    assert "tp_neuron_degree" in codes(plan_model("neuronx", LLAMA, tp="12", instance_type="trn1.32xlarge"))
