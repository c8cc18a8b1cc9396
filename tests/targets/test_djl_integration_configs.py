"""Issue 31 Deliver 2 on DJL's own integration-test configurations: lmi-build against the release's
properties managers, executed.

``tests/vendor/djl/integration_verdicts.json`` (``tests/vendor/djl/execute_integration_configs.py``)
holds what each release's properties manager did with the serving.properties its own integration tests
write (tests/integration/llm/prepare.py: the TensorRT-LLM and transformers-neuronx handler lists, and from
0.29 the SageMaker Neo lists, trtllm_neo_list and transformers_neuronx_neo_list: the ahead-of-time
compilation DJL's own CI runs, AWQ, FP8 and SmoothQuant at tp 4 and 8 among them). Here
lmi-build plans each configuration (``plan --properties``, the configuration's file) for a fixture model
of the family the configuration names (its model is on DJL's S3 bucket or the Hub, not here), on the
profile of that release, and:

- where DJL refuses the configuration, the plan is not valid;
- where DJL accepts it, the plan refuses it only for a reason in ``ELSEWHERE`` (the comparison test's
  reviewed table: checks outside DJL's properties manager) or ``REFUSED_AHEAD_OF_TIME`` (this corpus's);
- on every plan lmi-build makes, its start-up model (TensorRT-LLM: ``targets/trtllm/startup.evaluate``,
  what plan and ``verify --for-container`` evaluate, on the planned engine; Neuron: the release's reading
  of the batching keys, ``targets/neuronx/batching.container_batching``) accepts it, and every value both
  sides compute agrees (the plan's options for the keys the configuration gives, the start-up model's
  resolved values) with what DJL resolved, but for the values lmi-build writes otherwise on purpose
  (``WRITTEN_OTHERWISE``, reviewed).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lmi_build.planner.make import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.request import PlanRequest
from lmi_build.targets import get_target
from lmi_build.targets.neuronx.batching import container_batching
from lmi_build.targets.neuronx.profiles import get_profile as neuron_profile
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT
from tests.targets.test_djl_verdicts import ELSEWHERE, trtllm_startup_model

VERDICTS = REPO_ROOT / "tests" / "vendor" / "djl" / "integration_verdicts.json"

# configuration name -> the fixture config.json of the same family (architecture and, for Llama, generation)
FIXTURE_FOR = {
    "llama2-13b": "meta-llama--Llama-2-7b-hf", "llama2-7b-smoothquant": "meta-llama--Llama-2-7b-hf",
    "llama2-70b": "meta-llama--Llama-2-7b-hf", "llama2-7b-chat": "meta-llama--Llama-2-7b-hf",
    "llama-3-1-8b": "meta-llama--Llama-3.1-8B-Instruct", "baichuan2-13b": "baichuan-inc--Baichuan2-13B-Chat",
    "mistral-7b": "mistralai--Mistral-7B-v0.1", "gpt-j-6b": "EleutherAI--gpt-j-6b", "qwen-7b": "Qwen--Qwen-7B",
    "gpt2": "openai-community--gpt2", "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
    "flan-t5-xl": "google--flan-t5-large", "gpt2-quantize": "openai-community--gpt2",
    "opt-1.3b": "facebook--opt-125m", "opt-1.3b-streaming": "facebook--opt-125m",
    "pythia-2.8b": "togethercomputer--RedPajama-INCITE-7B-Base", "bloom-7b1": "bigscience--bloom-560m",
    "llama-7b-rb": "meta-llama--Llama-2-7b-hf", "llama-3-8b-rb-vllm": "meta-llama--Llama-3.1-8B-Instruct",
    "tiny-llama-rb-vllm": "huggyllama--llama-7b", "mistral-7b-rb": "mistralai--Mistral-7B-Instruct-v0.2",
    "llama-speculative-rb": "meta-llama--Llama-2-7b-hf", "llama-speculative-compiled-rb": "meta-llama--Llama-2-7b-hf",
    "tiny-llama-rb-lcnc": "huggyllama--llama-7b", "tiny-llama-rb-aot": "huggyllama--llama-7b",
    "tiny-llama-rb-aot-quant": "huggyllama--llama-7b",
    "llama-3-1-8b-instruct-vllm-nxdi": "meta-llama--Llama-3.1-8B-Instruct",
    "llama-3-2-1b-instruct-vllm-nxdi-aot": "meta-llama--Llama-3.1-8B-Instruct",
    "mixtral-8x7b-rb": "mistralai--Mixtral-8x7B-v0.1", "falcon-7b": "tiiuae--falcon-7b",
    "flan-t5-xxl": "google--flan-t5-large", "open-llama-7b": "huggyllama--llama-7b",
    "llama-7b-split": "meta-llama--Llama-2-7b-hf",
    # SageMaker Neo's lists (trtllm_neo_list, transformers_neuronx_neo_list): Llama 3 and 3.1 8B/70B stand
    # on the Llama 3.1 8B config (its GQA, 8 KV heads as the 70B's, divides tp 8; no Llama 3 config among the
    # fixtures, so on 0.29, TensorRT-LLM 0.11, the fixture's rope_scaling llama3, which Llama 3 has not, is
    # refused: ELSEWHERE's rope_scaling_version, and those plans are compared for no other refusal); Llama 2 13B
    # on Orca 2 13B (a Llama-2-13B fine-tune, its shape); CodeLlama 34B on CodeFuse-CodeLlama-34B (a
    # CodeLlama-34B fine-tune); CodeLlama 7B and the tiny Llama 2 on Llama 2 7B; Mixtral 8x22B and the random
    # tiny Mixtral on 8x7B
    "llama3-8b-tp1-fp16": "meta-llama--Llama-3.1-8B-Instruct", "llama3-8b-tp4-awq": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-8b-tp4-fp8": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-8b-tp4-smoothquant": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-70b-tp8-fp16": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-70b-tp8-awq": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-70b-tp8-fp8": "meta-llama--Llama-3.1-8B-Instruct",
    "llama3-70b-tp8-smoothquant": "meta-llama--Llama-3.1-8B-Instruct",
    "llama-2-13b-rb": "microsoft--Orca-2-13b", "llama-3.1-8b-rb": "meta-llama--Llama-3.1-8B-Instruct",
    "mixtral-8x22b": "mistralai--Mixtral-8x7B-v0.1", "mixtral-random-tiny": "mistralai--Mixtral-8x7B-v0.1",
    "codellama-34b": "codefuse-ai--CodeFuse-CodeLlama-34B", "codellama-7b-instruct": "meta-llama--Llama-2-7b-hf",
    "llama-3-8b": "meta-llama--Llama-3.1-8B-Instruct", "llama-3.1-8b": "meta-llama--Llama-3.1-8B-Instruct",
    "llama-2-tiny-speculative": "meta-llama--Llama-2-7b-hf",
}
# configurations no fixture stands for (reviewed): name -> why
NOT_PLANNED = {
    "internlm-7b": "no InternLM config.json among the fixtures",
    "chatglm3-6b": "the fixture is ChatGLM2 (option.chatglm_model_version chatglm3 names another converter)",
    "santacoder": "no GPTBigCode config.json among the fixtures",
    "stable-diffusion-2.1-neuron": "a diffusion pipeline, not a text-generation model lmi-build plans",
    "stable-diffusion-1.5-neuron": "a diffusion pipeline, not a text-generation model lmi-build plans",
    "stable-diffusion-xl-neuron": "a diffusion pipeline, not a text-generation model lmi-build plans",
}
# The reviewed table, beyond the comparison test's ELSEWHERE: plan errors for configurations DJL's properties
# manager accepts (code -> (a text the error's message must contain, the reason)).
REFUSED_AHEAD_OF_TIME: dict[str, tuple[str, str]] = {
    "neuron_loader_compiles": ("option.model_loader=vllm", "DJL accepts it and vLLM's Neuron loader compiles at "
                               "start-up; lmi-build builds ahead of time and refuses what the container would "
                               "compile again (cited in the message)"),
    "neuron_refused_option": ("option.speculative_draft_model", "speculative decoding: DJL's handler loads the "
                              "draft model and compiles the speculation kernels at start-up; lmi-build's compile "
                              "driver builds neither (cited in the message)"),
    "compiled_graph_path_model": ("", "option.compiled_graph_path is DJL's S3 compile cache of the original "
                                  "weights; the fixture stands in for them and is no model the container can "
                                  "fetch: a limit of the fixture, not a rule"),
}
# The reviewed table of values lmi-build writes otherwise than DJL resolves the configuration, on purpose:
# (profile, key, DJL's value) -> (lmi-build's value, the reason).
FLAT_LAYOUT = ("LMI 0.33 serves TensorRT-LLM 0.21 engines two ways: lmi-build builds the flat LLM API layout, served "
               "by trtllm_async_service with option.rolling_batch=disable (option_rewritten warns of the rewrite; "
               "targets/trtllm/layouts.py flat_properties), whose recommender batch is 32 "
               "(LmiConfigRecommender.java@0.33.0-dlc:125-143); DJL's Neo builds the toolkit's model repository "
               "(sm_neo_trt_llm_partition.py@0.33.0-dlc:49 create_model_repo, :64 engine=MPI) and serves it with "
               "rolling_batch=trtllm (tensorrt_llm.py@0.33.0-dlc:36-40 TRTLLMRollingBatch), whose batch is 256")
WRITTEN_OTHERWISE: dict[tuple[str, str, str], tuple[str, str]] = {
    ("lmi-0.33.0-trtllm-0.21.0", "rolling_batch", "trtllm"): ("disable", FLAT_LAYOUT),
    ("lmi-0.33.0-trtllm-0.21.0", "max_rolling_batch_size", "256"): ("32", FLAT_LAYOUT),
}
# the option keys whose values both compare, where the configuration gives the key (a key it does not give
# is lmi-build's own choice for what it writes, compared through the start-up models instead)
COMPARED = ("rolling_batch", "model_loader", "batch_size", "max_rolling_batch_size", "n_positions",
            "context_length_estimate", "tensor_parallel_degree", "pipeline_parallel_degree", "dtype", "quantize",
            "max_input_len", "max_output_len", "max_num_tokens")


@cache
def _facts() -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(VERDICTS.read_text())
    return facts


def _plan(target: str, profile: str, entry: dict[str, Any], work: Path) -> BuildPlan:
    written = work / f"{entry['model']}.properties"
    written.write_text("".join(f"{key}={value}\n" for key, value in entry["properties"].items()))
    request = PlanRequest(model=str(FIXTURE_CONFIGS / FIXTURE_FOR[entry["model"]]), profile=profile, env={},
                          properties=written)
    return plan_request(request, get_target(target)).plan


def test_the_facts_name_branch_commit_and_source_line() -> None:
    branches = _facts()["branches"]
    assert {(b["branch"], b["target"]) for b in branches} >= {
        ("0.30.0-dlc", "trtllm"), ("0.33.0-dlc", "trtllm"), ("0.30.0-dlc", "neuronx"), ("0.33.0-dlc", "neuronx")}
    neo = {(b["branch"], b["configurations"].split()[1].rstrip(",")) for b in branches if "_neo_list" in b["configurations"]}
    assert neo >= {(branch, "trtllm_neo_list") for branch in ("0.29.0-dlc", "0.30.0-dlc", "0.33.0-dlc")} | {
        (branch, "transformers_neuronx_neo_list") for branch in ("0.29.0-dlc", "0.30.0-dlc", "0.34.0-dlc")}, \
        "SageMaker Neo's configurations executed where prepare.py has them"
    for branch in branches:
        assert len(branch["commit"]) == 40 and branch["entries"], branch["branch"]
        for entry in branch["entries"]:
            assert entry["source"].startswith("tests/integration/llm/prepare.py:") and entry["vendor"] is not None
            assert entry["model"] in FIXTURE_FOR or entry["model"] in NOT_PLANNED, entry["model"]


def _differences(target: str, profile: str, entry: dict[str, Any], plan: BuildPlan) -> list[str]:
    vendor, found = entry["vendor"], []
    if not vendor["accepted"]:
        return [] if not plan.valid else [f"DJL refuses it ({vendor['error']}), the plan is valid"]
    for error in plan.errors:
        allowed = ELSEWHERE.get(error.code) or REFUSED_AHEAD_OF_TIME.get(error.code)
        if allowed is None or allowed[0] not in error.message:
            found.append(f"DJL accepts it, the plan refuses it: {error.code}: {error.message[:160]}")
    if plan.errors:
        return found  # a refused plan writes nothing and is given no start-up model to compare
    djl = {**vendor.get("resolved", {}), **vendor.get("llm_kwargs", {})}
    given = entry["properties"]
    sides = {"the plan": {key: plan.options.get(f"option.{key}") for key in COMPARED if f"option.{key}" in given}}
    if target == "neuronx":  # lmi-build's start-up model of the release's batching keys
        batching = container_batching(given, neuron_profile(profile))
        batch = "max_rolling_batch_size" if batching.rolling else "batch_size"
        sides["the start-up model"] = {"rolling_batch": batching.rolling_batch, batch: batching.neff_batch}
        if batching.refusal:
            found.append(f"the start-up model refuses it: {batching.refusal[:160]}")
    elif target == "trtllm" and plan.build is not None:  # what plan and verify --for-container evaluate
        outcome = trtllm_startup_model(profile, plan, given)
        sides["the start-up model"] = dict(outcome.resolved)
        if outcome.outcome == "rejected":
            found.append(f"the start-up model rejects it: {outcome}")
    for side, values in sides.items():
        for key, value in values.items():
            theirs = djl.get(key)
            if value is None or theirs is None:
                continue  # a value only one side computes (the other leaves it to the engine's default)
            reviewed = WRITTEN_OTHERWISE.get((profile, key, str(theirs).lower()))
            if str(value).lower() != str(theirs).lower() and (reviewed is None or reviewed[0] != str(value)):
                found.append(f"{key}: {side} resolves {value}, DJL {theirs}")
    return found


@pytest.mark.parametrize("index", range(len(_facts()["branches"])))
def test_lmi_build_agrees_with_the_release_on_its_own_configurations(index: int, tmp_path: Path) -> None:
    branch = _facts()["branches"][index]
    target, profile = branch["target"], branch["profile"]
    differences = []
    for entry in branch["entries"]:
        if entry["model"] in NOT_PLANNED:
            continue
        plan = _plan(target, profile, entry, tmp_path)
        found = _differences(target, profile, entry, plan)
        differences += [f"{branch['branch']} {entry['model']} ({entry['source']}): {f}" for f in found]
    assert not differences, "\n".join(differences)
