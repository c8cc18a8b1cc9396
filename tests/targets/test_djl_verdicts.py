"""Issue 31 Deliver 2: lmi-build's start-up models against DJL's own Python, executed.

``tests/vendor/djl/verdicts.json`` holds what each release's properties manager did (accepted, or the
exception) with the serving.properties lmi-build writes for every fixture x profile x option set
(``tests/vendor/djl/execute_properties.py``, which says what was replaced by recorders). Here lmi-build
plans the same corpus again and evaluates its ``verify --for-container`` rules on the same properties:

- a configuration DJL refuses must be refused by plan and by verify (no "valid" artifact DJL rejects);
- a configuration DJL accepts may be refused by plan only for a reason listed in ``ELSEWHERE`` (a check
  that lives outside DJL's properties manager), and verify's properties rules must accept it;
- the properties are still the ones lmi-build writes (else the facts describe another output: re-record).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.planner import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets import get_target, request_for
from lmi_build.targets.hf.profiles import get_profile as hf_profile
from lmi_build.targets.hf.startup import startup_problems
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT

VERDICTS = REPO_ROOT / "tests" / "vendor" / "djl" / "verdicts.json"

# The reviewed table: plan errors for configurations DJL's properties manager accepts, each with where
# the check lives instead (code -> (a text the error's message must contain, or "", the reason)).
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
    assert trtllm >= {"0.30.0-dlc", "0.33.0-dlc"}, "TensorRtLlmProperties executed on lmi-build's trtllm outputs"
    for branch in branches:
        assert len(branch["commit"]) == 40 and branch["executed"].startswith("djl_python.properties_manager.")
        assert branch["entries"], branch["branch"]


@pytest.mark.parametrize("index", range(11))
def test_lmi_build_agrees_with_the_executed_release(index: int) -> None:
    branch = _facts()["branches"][index]
    target, profile = branch["target"], branch["profile"]
    differences: list[str] = []
    for entry in branch["entries"]:
        plan = _plan(target, profile, entry)
        where = f"{branch['branch']} {entry['model']} {entry['fields']}"
        layouts = get_target(target).layouts()
        layout = layouts.get(str(getattr(plan.build, "layout", "")), next(iter(layouts.values())))
        if serving_properties(plan, layout) != entry["properties"]:
            differences.append(f"{where}: lmi-build writes other properties now: re-run execute_properties.py")
            continue
        vendor = entry["vendor"]
        verified = [e.code for e in startup_problems(hf_profile(profile), entry["properties"])] if target == "hf" else []
        if not vendor["accepted"]:
            if plan.valid:
                differences.append(f"{where}: DJL refuses it ({vendor['error']}), the plan is valid")
            if target == "hf" and not verified:
                differences.append(f"{where}: DJL refuses it ({vendor['error']}), verify --for-container accepts it")
            continue
        if verified:
            differences.append(f"{where}: DJL accepts it, verify --for-container refuses it: {verified}")
        for error in plan.errors:
            allowed = ELSEWHERE.get(error.code)
            if allowed is None or allowed[0] not in error.message:
                differences.append(f"{where}: DJL accepts it, the plan refuses it: {error.code}: {error.message[:160]}")
    assert not differences, "\n".join(differences[:20])
