"""Issue 31 item 1: lmi-build's Neuron start-up model against DJL's Neuron handler, executed.

``tests/vendor/djl/neuron_handler.json`` holds what each Neuron release's handler did
(``TransformersNeuronXService.set_configs``, ``set_model_loader``, ``load_model``, with
transformers-neuronx replaced by recorders: ``tests/vendor/djl/execute_neuron_handler.py``) on the
artifact lmi-build built (Neuron SDK stand-in) for every fixture x option set. Here lmi-build plans the
same entries again and, for a sample, builds and verifies them (``verify --for-container``):

- the loader DJL chose is the one the plan built for and the one ``verify`` says the release picks;
- the transformers_neuronx ``from_pretrained`` kwargs (batch_size, amp, tp_degree, n_positions,
  context_length_estimate) and NeuronConfig (continuous batching, on_device_embedding ...) DJL passes
  are the ones the plan compiled the NEFFs with (``NeuronxBuild.tnx_kwargs``/``neuron_config``): the
  same HLO, so transformers-neuronx finds the NEFFs by hash (its own lookup is not executed: the
  recorder stands in for it);
- DJL looks the NEFFs up in the directory that holds them (``load(<artifact>/compiled)`` before
  ``to_neuron``): a valid plan is "loads"; no ``load`` means DJL compiles at start-up;
- for the optimum loader (0.27), the batch DJL passes to optimum-neuron and its rolling-batch strategy are
  the batch and continuous batching the plan compiled (optimum-neuron builds the NeuronConfig: not recorded);
- the handler did not raise.

Every difference is fixed in lmi-build or listed in ``REVIEWED`` with its reason.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lmi_build.planner.make import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets import get_target, request_for
from tests.cli_process import run_lmi_build
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT

FACTS = REPO_ROOT / "tests" / "vendor" / "djl" / "neuron_handler.json"
BRANCHES = ("0.27.0-dlc", "0.28.0-dlc", "0.29.0-dlc", "0.30.0-dlc", "0.32.0-dlc", "0.33.0-dlc", "0.34.0-dlc")
LOADERS = {"TNXModelLoader": "tnx", "OptimumModelLoader": "optimum", "vllm (deferred to vLLM)": "vllm"}

# The reviewed differences: (branch, model, fields as JSON, what differs) -> the reason it is not a fault
# of lmi-build's output. Empty: every recorded entry agrees.
# Differences reviewed, (branch, model, fields, difference) -> why. 0.29's handler loads Llama-3.1 without an
# error, but its transformers-neuronx 0.11.351 reads no rope_scaling: served with unscaled RoPE, which the plan
# now refuses (issue 42 item 8; the profile's rope_scaling_sources). The recorded run stays as DJL did it.
_ROPE_REFUSED = "lmi-build refuses it now (['neuron_rope_scaling']), it was built"
REVIEWED: dict[tuple[str, str, str, str], str] = {
    ("0.29.0-dlc", "meta-llama--Llama-3.1-8B-Instruct", fields, _ROPE_REFUSED): "unscaled RoPE on 0.29 (issue 42 item 8)"
    for fields in ('{}', '{"max_batch_size": 4}', '{"option": ["option.batch_size=4"]}',
                   '{"max_batch_size": 4, "option": ["option.rolling_batch=vllm"]}',
                   '{"max_batch_size": 4, "option": ["option.model_loader=vllm"]}')}
# Entries lmi-build plans but does not build (so DJL's handler had no artifact): (branch, option) -> why.
# Empty: every entry lmi-build plans is built and executed.
UNBUILT_REVIEWED: dict[tuple[str, str], str] = {}


@cache
def _facts() -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(FACTS.read_text())
    return facts


def _plan(profile: str, entry: dict[str, Any]) -> BuildPlan:
    fields = {key: tuple(value) if isinstance(value, list) else value for key, value in entry["fields"].items()}
    request = request_for("neuronx", {"model": str(FIXTURE_CONFIGS / entry["model"]), "profile": profile, "tp": "2", **fields}, env={})
    return plan_request(request, get_target("neuronx")).plan


def _shown_neuron_config(config: dict[str, Any]) -> dict[str, Any]:
    """lmi-build's NeuronConfig as the recorder shows DJL's (nested configs as ``Class(key=value)``)."""
    nested = {"continuous_batching": "ContinuousBatchingConfig", "quant": "QuantizationConfig",
              "on_device_generation": "GenerationConfig"}
    return {key: (f"{nested[key]}({', '.join(f'{k}={v}' for k, v in sorted(value.items()))})"
                  if isinstance(value, dict) and key in nested else value) for key, value in sorted(config.items())}


def differences(branch: dict[str, Any], entry: dict[str, Any], plan: BuildPlan) -> list[str]:
    """What DJL's handler did with the built artifact that lmi-build's plan says otherwise."""
    handler = entry["handler"]
    build = plan.build
    found: list[str] = []
    if not plan.valid:
        found.append(f"lmi-build refuses it now ({[e.code for e in plan.errors]}), it was built: re-record")
        return found
    if handler["outcome"] == "raised":
        return [f"DJL's handler raises: {handler['error']}"]
    loader = LOADERS.get(handler["loader"], handler["loader"])
    if loader != build.loader:
        found.append(f"loader: DJL {loader}, the plan built for {build.loader}")
    if loader == "optimum":
        # DJL builds no NeuronConfig here: optimum-neuron does, with continuous batching for llama/mistral at a
        # batch > 1 (optimum-neuron v0.0.20 modeling_decoder.py:141-149, exporters/neuron/model_configs.py:448-451,
        # 551-554), the batch DJL passes and checks against the neuron block (model_loader.py@0.27.0-dlc:457-461,
        # 536-540), and DJL's scheduler runs continuous batching for those model types (transformers_neuronx.py
        # @0.27.0-dlc:90-94): its resolved batch and strategy are what the plan compiled.
        resolved = handler["resolved"]
        if resolved["batch_size"] != build.batch_size:
            found.append(f"batch size: DJL {resolved['batch_size']}, compiled {build.batch_size}")
        if (resolved["rolling_batch_strategy"] == "continuous_batching") != build.continuous_batching:
            found.append(f"continuous batching: DJL {resolved['rolling_batch_strategy']}, "
                         f"compiled {build.continuous_batching}")
    if loader != "tnx":
        return found
    called = (handler["from_pretrained"] or {}).get("kwargs")
    if called != build.tnx_kwargs:
        found.append(f"from_pretrained kwargs: DJL {called}, compiled with {build.tnx_kwargs}")
    if handler["neuron_config"] != _shown_neuron_config(build.neuron_config):
        found.append(f"NeuronConfig: DJL {handler['neuron_config']}, compiled with {build.neuron_config}")
    continuous = "continuous_batching" in (handler["neuron_config"] or {})
    if continuous != build.continuous_batching:
        found.append(f"continuous batching: DJL {continuous}, compiled {build.continuous_batching}")
    if handler["load"] != "<artifact>/compiled" or not handler["to_neuron"]:
        found.append(f"DJL does not look the NEFFs up in compiled/ (load {handler['load']}): it compiles")
    return found


def test_the_facts_name_branch_commit_and_what_was_executed() -> None:
    branches = _facts()["branches"]
    assert {b["branch"] for b in branches} == set(BRANCHES)
    for branch in branches:
        assert len(branch["commit"]) == 40 and "TransformersNeuronXService" in branch["executed"]
        assert sum("handler" in entry for entry in branch["entries"]) >= 55, branch["branch"]


@pytest.mark.parametrize("branch_name", BRANCHES)
def test_the_plan_agrees_with_the_executed_handler(branch_name: str) -> None:
    branch = next(b for b in _facts()["branches"] if b["branch"] == branch_name)
    found: list[str] = []
    for entry in branch["entries"]:
        if "handler" not in entry:
            reviewed = any((branch_name, option) in UNBUILT_REVIEWED for option in entry["fields"].get("option", []))
            assert reviewed or not _plan(branch["profile"], entry).valid, f"{entry}: lmi-build builds it now: re-record"
            continue
        fields = json.dumps(entry["fields"], sort_keys=True)
        for difference in differences(branch, entry, _plan(branch["profile"], entry)):
            if (branch_name, entry["model"], fields, difference.split(":")[0]) not in REVIEWED:
                found.append(f"{branch_name} {entry['model']} {fields}: {difference}")
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:25])


SAMPLE = "meta-llama--Llama-2-7b-hf"


@pytest.mark.parametrize("branch_name", BRANCHES)
def test_verify_for_container_agrees_with_the_executed_handler(branch_name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify --for-container`` on the artifacts built again (stand-in SDK), for one model x every
    option set: the loader it says the release picks, "loads" with the NEFFs in the directory DJL
    ``load``s, and the weights directory DJL's ``from_pretrained`` reads is in the artifact."""
    from lmi_build.artifact.manifest import load_manifest
    from lmi_build.artifact.verify import serving_target
    from lmi_build.targets import TARGETS
    from lmi_build.targets.neuronx.compatibility import container_startup
    from lmi_build.targets.neuronx.profiles import get_profile
    from tests.fixtures_neuronx import STANDIN_PYTHON, write_neuron_model

    branch = next(b for b in _facts()["branches"] if b["branch"] == branch_name)
    profile = branch["profile"]
    monkeypatch.setenv("LMI_BUILD_NEURON_PYTHON", str(STANDIN_PYTHON))
    monkeypatch.setenv("STANDIN_MODE", "ok")
    monkeypatch.setenv("STANDIN_NEURONX_CC", get_profile(profile).neuronx_cc)
    monkeypatch.setenv("STANDIN_OPTIMUM_NEURON", get_profile(profile).optimum_neuron)
    model = write_neuron_model(tmp_path / "model", config=FIXTURE_CONFIGS / SAMPLE / "config.json")
    found: list[str] = []
    checked = 0
    for index, entry in enumerate(e for e in branch["entries"] if e["model"] == SAMPLE and "handler" in e):
        out = tmp_path / f"out{index}"
        fields = entry["fields"]
        command = ["neuronx", "--model", str(model), "--tp", "2", "--profile", profile, "--output", str(out),
                   "--quiet"]
        if "max_batch_size" in fields:
            command += ["--max-batch-size", str(fields["max_batch_size"])]
        for option in fields.get("option", []):
            command += ["-o", option]
        result = run_lmi_build(*command)
        assert result.returncode == 0, (result.stdout + result.stderr)
        outcome = container_startup(load_manifest(out), serving_target(TARGETS, container=profile))
        assert outcome is not None
        handler = entry["handler"]
        where = f"{branch_name} {fields}"
        if LOADERS.get(handler["loader"]) != outcome.loader:
            found.append(f"{where}: verify says loader {outcome.loader}, DJL {handler['loader']}")
        if handler["loader"] != "TNXModelLoader":  # optimum's calls are recorded, not summarized (as above)
            checked += 1
            continue
        djl_loads = handler["outcome"] == "loaded" and handler["load"] == "<artifact>/compiled"
        if djl_loads != (outcome.outcome == "loads"):
            found.append(f"{where}: verify says {outcome.outcome}, DJL load({handler['load']})")
        if outcome.loads and not all(os.path.dirname(neff) == "compiled" for neff in outcome.loads):
            found.append(f"{where}: verify's NEFFs {outcome.loads} are not where DJL looks them up (compiled/)")
        called = (handler["from_pretrained"] or {}).get("kwargs") or {}
        continuous = "continuous_batching" in (handler["neuron_config"] or {})
        model_view = {"rolling_batch": outcome.resolved.get("rolling_batch"),
                      "neff_batch_size": outcome.resolved.get("neff_batch_size"),
                      "continuous_batching": outcome.resolved.get("continuous_batching")}
        djl_view = {"rolling_batch": handler["resolved"]["rolling_batch"],
                    "neff_batch_size": str(called.get("batch_size")), "continuous_batching": str(continuous).lower()}
        if model_view != djl_view:
            found.append(f"{where}: verify's start-up model resolves {model_view}, DJL {djl_view}")
        weights = (handler["from_pretrained"] or {}).get("path") or ""
        if not (out / weights.removeprefix("<artifact>/")).is_dir():
            found.append(f"{where}: DJL's from_pretrained reads {weights}, the artifact has no such directory")
        checked += 1
    assert checked >= 4
    assert not found, "\n".join(found)
