"""Issue 31 Deliver 2: lmi-build's start-up models against DJL's own Python, executed.

``tests/vendor/djl/verdicts.json`` holds what each release's properties manager did (accepted, or the
exception) with the serving.properties lmi-build writes for every fixture x profile x option set
(``tests/vendor/djl/execute_properties.py``, which says what was replaced by recorders). Here lmi-build
plans the same corpus again and evaluates its ``verify --for-container`` rules on the same properties:

- a configuration DJL refuses must be refused by plan and by verify (no "valid" artifact DJL rejects);
- a configuration DJL accepts may be refused by plan only for a reason listed in ``ELSEWHERE`` (a check
  that lives outside DJL's properties manager), and verify's properties rules must accept it;
- TensorRT-LLM: lmi-build's start-up model (``targets/trtllm/startup.evaluate``, what plan and ``verify
  --for-container`` evaluate) on the same serving.properties and the plan's engine does not reject what
  DJL accepts (nor accept what it refuses), and resolves the values DJL resolved (rolling batch, batch
  sizes, parallel degrees, dtype: every key both name, the LLM() arguments on the 0.33+ layout);
- the properties are still the ones lmi-build writes (else the facts describe another output: re-record).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.planner.make import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.startup import StartupOutcome
from lmi_build.targets import get_target, request_for
from lmi_build.targets.hf.profiles import get_profile as hf_profile
from lmi_build.targets.hf.profiles import load_profiles as load_hf_profiles
from lmi_build.targets.hf.startup import startup_problems
from lmi_build.targets.neuronx.profiles import load_profiles as load_neuron_profiles
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.profiles import load_profiles
from lmi_build.targets.trtllm.startup import (
    FLAT_LAYOUT,
    TOOLKIT_LAYOUT,
    StartupInputs,
    engine_config,
    evaluate,
    planned_files,
)
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT
from tests.vendor.djl.execute_properties import written_layout

VERDICTS = REPO_ROOT / "tests" / "vendor" / "djl" / "verdicts.json"

# The reviewed table: plan errors (and TensorRT-LLM start-up rules that reject) for configurations DJL's
# properties manager accepts, each with where the check lives instead (code -> (a text the error's message
# must contain, or "", the reason)).
ELSEWHERE: dict[str, tuple[str, str]] = {
    "neuron_batching": ("option.mpi_mode=true", "the Java front-end's MPI mode (LmiConfigRecommender setMpiMode, "
                        "PyModel's GPU count), not executed by the script: issue 31 item 4"),
    "neuron_rope_scaling": ("", "transformers / transformers-neuronx reject the rope_scaling at model load, "
                            "not DJL's properties (targets/neuronx/rope.py cites them)"),
    "remote_code": ("", "the model's own code, which vLLM's transformers (or TensorRT-LLM's checkpoint conversion) "
                    "loads with trust_remote_code; DJL's properties take the flag as given"),
    "tp_heads": ("", "vLLM's model config (or TensorRT-LLM's checkpoint conversion, which splits the heads by tp) "
                 "checks that tp divides the attention heads, not DJL's properties"),
    # TensorRT-LLM: DJL's TensorRtLlmProperties takes runtime knobs only (0.33.0-dlc trt_properties.py:30-36,
    # "we handle compilation/quantization ahead of time"); what a release's convert/build scripts support
    # is checked at compile time, which lmi-build does ahead of time
    "trtllm_route": ("", "TensorRT-LLM's convert_checkpoint.py / engine build (pp_size asserts, encoder-decoder "
                     "pairs), the compile step, not DJL's runtime properties"),
    "architecture_version": ("", "the TensorRT-LLM release's model support (its models registry), checked at "
                             "checkpoint conversion, not DJL's properties"),
    "rope_scaling_version": ("", "the TensorRT-LLM release's RoPE support (its model code reads rope_scaling at "
                             "checkpoint conversion; data/since.toml cites it), not DJL's properties"),
    # Neuron 0.26 (properties only: its handler is not executed): lmi-build does not build the tree that
    # release's loaders read, and refuses a loader the release lacks where its properties ignore the key
    "neuron_unbuilt": ("", "lmi-build's scope: the tree the release's model loader reads (0.26's TNX partition "
                       "layout, its NeuronXModelAdapter export; cited in the message), not DJL's properties"),
    # hf (issue 39): LMI-Dist 0.27-0.28's LmiDistRbProperties has no pipeline_parallel_degree: pydantic drops
    # the key and the engine is built without it (lmi_dist_releases.json), so DJL "accepts" a --pp it ignores
    "hf_pipeline_parallel": ("ignores option.pipeline_parallel_degree", "LMI-Dist 0.27-0.28 drop the key unread "
                             "(no such field; VllmEngineArgs without pipeline_parallel_size): lmi-build refuses a "
                             "pipeline parallelism the engine would not do, in plan and verify alike"),
    "max_len_positions": ("exceeds the model's", "vLLM's model config refuses a max_model_len over the model's "
                          "positions (v0.6.3.post1 vllm/config.py:1673 _get_and_verify_max_len), not DJL's properties, "
                          "which pass option.max_model_len through"),
    "hf_rope_scaling": ("", "the profile's vLLM builds the rotary embedding at model load (get_rope raises on a "
                        "rope_scaling type it lacks: architectures.json \"rope\"), or (0.26) transformers 4.36.2's "
                        "LlamaConfig refuses it when DJL reads config.json (loader_architectures.toml [[own_loader]]), "
                        "not DJL's properties"),
    # hf 0.26 (issue 39): LmiDistQuantizeMethods takes awq, but lmi-build withholds option.quantize for a quantized
    # checkpoint and LMI-Dist 8 is told the method only by it (the profile's formats cite it): none is written
    "hf_format": ("loads no --quantize", "the checkpoint format the engine loads (LMI-Dist 8's get_model takes the "
                  "method from option.quantize only, lmi_dist_rolling_batch.py@0.26.0-dlc:60-69), not DJL's properties, "
                  "which take any of their quantize names"),
    # TensorRT-LLM 1.0 (issue 39): the start-up model's release-defect rule (startup.RELEASE_DEFECT) rejects every
    # artifact at 0.35.0/0.35.1/0.36.0, where the properties manager accepts them all
    "trtllm_runtime": ("got multiple values for keyword argument", "the release's own TensorRT-LLM service, after "
                       "the properties manager: lmi_trtllm/trtllm_async_service.py:122-129 passes tensor_parallel_size, "
                       "trust_remote_code, dtype and revision to LLM() by name and again in **get_llm_kwargs() "
                       "(TypeError); that handler is executed in tests/vendor/djl/trtllm_handler.json "
                       "(test_djl_trtllm_handler.py), and plan names it as a warning, verify --for-container as an error"),
    "neuron_model_loader": ("has no option.model_loader=vllm", "0.26's TransformerNeuronXProperties has no "
                            "model_loader field and pydantic 1 ignores the key (0.26.0-dlc properties.py:63-64, "
                            "Config without extra=forbid): the handler then picks optimum or TNX itself "
                            "(transformers_neuronx.py@0.26.0-dlc:44-56), so lmi-build refuses the loader asked for "
                            "rather than build for another (0.27 refuses it itself: recorded)"),
}


@cache
def _facts() -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(VERDICTS.read_text())
    return facts


def _plan(target: str, profile: str, entry: dict[str, Any]) -> BuildPlan:
    fields = {key: tuple(value) if isinstance(value, list) else value for key, value in entry["fields"].items()}
    request = request_for(target, {"model": str(FIXTURE_CONFIGS / entry["model"]), "profile": profile, "tp": "2", **fields}, env={})
    return plan_request(request, get_target(target)).plan


def test_the_facts_name_branch_commit_and_what_was_executed() -> None:
    branches = _facts()["branches"]
    assert {b["branch"] for b in branches} >= {"0.29.0-dlc", "0.30.0-dlc", "0.35.0-dlc", "0.36.0-lmi27-dlc"}
    trtllm = {b["branch"] for b in branches if b["target"] == "trtllm"}
    assert trtllm >= {"0.26.0-dlc", "0.27.0-dlc", "0.28.0-dlc", "0.29.0-dlc", "0.30.0-dlc", "0.33.0-dlc"}, \
        "TensorRtLlmProperties executed on lmi-build's trtllm outputs at every profile's branch"
    pydantic = {b["branch"]: b["pydantic"] for b in branches}
    assert pydantic["0.26.0-dlc"].startswith("1.") and pydantic["0.28.0-dlc"].startswith("2."), \
        "0.26 is written for pydantic 1 and executed with it"
    # issue 39: every LMI-Dist profile's branch and 0.32's vllm rolling batch (the new ones on a small corpus)
    hf = {(b["branch"], b["profile"]) for b in branches if b["target"] == "hf"}
    assert hf >= {("0.26.0-dlc", "lmi-0.26.0-lmi-dist-8.0.0"), ("0.27.0-dlc", "lmi-0.27.0-lmi-dist-9.0.0"), ("0.28.0-dlc", "lmi-0.28.0-lmi-dist-10.0.0"),
                  ("0.30.0-dlc", "lmi-0.30.0-lmi-dist-12.0.0"), ("0.31.0-dlc", "lmi-0.31.0-lmi-dist-13.0.0"),
                  ("0.32.0-dlc", "lmi-0.32.0-lmi-dist-13.0.0"), ("0.32.0-dlc", "lmi-0.32.0-vllm-0.7.3")}
    # issue 39: every profile of every target, each executed at its own image's branch (or tag, or master for the
    # nightly) at least once
    profiles = {p.name for p in [*load_profiles(), *load_hf_profiles(), *load_neuron_profiles()]}
    assert profiles - {b["profile"] for b in branches} == set(), "a profile without executed DJL verdicts"
    for branch in branches:
        assert len(branch["commit"]) == 40 and branch["executed"].startswith("djl_python.properties_manager.")
        assert branch["entries"], branch["branch"]


def trtllm_startup_model(profile: str, plan: BuildPlan, properties: dict[str, str],
                         served_on: str | None = None) -> StartupOutcome:
    """lmi-build's TensorRT-LLM start-up model (what plan and ``verify --for-container`` evaluate) on
    ``properties`` with the files and engine the plan builds for ``profile``, served on ``served_on``'s
    release (default: the profile's own)."""
    profiles = {p.name: p for p in load_profiles()}
    container = profiles[profile]
    layout = TOOLKIT_LAYOUT if container.layout == "toolkit" else FLAT_LAYOUT
    build = plan.build
    assert isinstance(build, TrtllmBuild)
    return evaluate(profiles[served_on or profile], StartupInputs(
        properties=properties, layout=layout, files=planned_files(layout, build.world_size),
        engine=engine_config(build, plan.quantization), engine_version=container.tensorrt_llm))


def _trtllm_startup(profile: str, entry: dict[str, Any], plan: BuildPlan) -> list[str]:
    """What lmi-build's TensorRT-LLM start-up model says otherwise than DJL's recorded verdict and values."""
    outcome = trtllm_startup_model(profile, plan, entry["properties"])
    vendor = entry["vendor"]
    found = []
    # a rejection whose every rejecting rule lives outside the properties manager (ELSEWHERE) is no refusal of it
    rejecting = [rule for rule in outcome.rules if rule.effect == "rejected"]
    outside = bool(rejecting) and all(rule.rule in ELSEWHERE and ELSEWHERE[rule.rule][0] in rule.message
                                      for rule in rejecting)
    if vendor["accepted"] == (outcome.outcome == "rejected") and not (vendor["accepted"] and outside):
        found.append(f"the start-up model says {outcome.outcome}, DJL {vendor.get('error', 'accepts it')}")
    djl = {**vendor.get("resolved", {}), **vendor.get("llm_kwargs", {})}
    for key in sorted(outcome.resolved.keys() & djl.keys()):
        if outcome.resolved[key] != str(djl[key]):
            found.append(f"{key}: the start-up model resolves {outcome.resolved[key]}, DJL {djl[key]}")
    return found


@pytest.mark.parametrize("index", range(len(_facts()["branches"])))
def test_lmi_build_agrees_with_the_executed_release(index: int) -> None:
    branch = _facts()["branches"][index]
    target, profile = branch["target"], branch["profile"]
    differences: list[str] = []
    for entry in branch["entries"]:
        plan = _plan(target, profile, entry)
        where = f"{branch['branch']} {entry['model']} {entry['fields']}"
        if serving_properties(plan, written_layout(target, profile, plan)) != entry["properties"]:
            differences.append(f"{where}: lmi-build writes other properties now: re-run execute_properties.py")
            continue
        vendor = entry["vendor"]
        found = startup_problems(hf_profile(profile), entry["properties"]) if target == "hf" else []
        verified = [e.code for e in found]
        if not vendor["accepted"]:
            if plan.valid:
                differences.append(f"{where}: DJL refuses it ({vendor['error']}), the plan is valid")
            if target == "hf" and not verified:
                differences.append(f"{where}: DJL refuses it ({vendor['error']}), verify --for-container accepts it")
            continue
        if target == "trtllm":
            differences += [f"{where}: {found}" for found in _trtllm_startup(profile, entry, plan)]
        stricter = [e.code for e in found if e.code not in ELSEWHERE or ELSEWHERE[e.code][0] not in e.message]
        if stricter:
            differences.append(f"{where}: DJL accepts it, verify --for-container refuses it: {stricter}")
        for error in plan.errors:
            allowed = ELSEWHERE.get(error.code)
            if allowed is None or allowed[0] not in error.message:
                differences.append(f"{where}: DJL accepts it, the plan refuses it: {error.code}: {error.message[:160]}")
    assert not differences, "\n".join(differences[:20])
