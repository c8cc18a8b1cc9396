"""Issue 31: lmi-build's TensorRT-LLM start-up model against DJL's TensorRT-LLM start-up, executed.

``tests/vendor/djl/trtllm_handler.json`` holds what 0.26.0-dlc-0.35.1-dlc and v0.36.0 did with the artifact
lmi-build built (trtllm-build stand-in; 0.26's examples/llama/build.py, the example-script stand-in) for
every fixture x option set it plans valid (``tests/vendor/djl/execute_trtllm_handler.py``, which says
what ran and what was recorded): whether the
front-end's ``isValidTrtLlmModelRepo`` detected a prebuilt engine (else it builds one at start-up),
whether the Python handler's ``initialize`` raised, and the call that loads the engine
(``tensorrt_llm_toolkit.init_inference`` / ``LLM``) with its directory and arguments. Here lmi-build
plans each entry again and evaluates its start-up model (``targets/trtllm/startup.evaluate``, what plan
and ``verify --for-container`` evaluate) on the recorded serving.properties:

- "loads" exactly when DJL detected the artifact, initialized, and loads the artifact directory itself;
  the other release's detection on it (the other layout) is the model's on that release (``rebuilds``);
- the values it resolves are the ones DJL passes to the loading call (parallel degrees, batch, tokens,
  dtype), and the parallel degrees DJL starts are the engine's (the runtime's world-size check);
- ``verify --for-container`` on one model's artifacts, built again, names the loader DJL called and
  engine files that are inside the directory DJL loads.

Every difference is fixed in lmi-build or listed in ``REVIEWED`` with its reason.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.planner.make import plan_request
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.startup import StartupOutcome
from lmi_build.targets import get_target, request_for
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT
from tests.targets.test_djl_verdicts import trtllm_startup_model
from tests.vendor.djl.execute_properties import written_layout

FACTS = REPO_ROOT / "tests" / "vendor" / "djl" / "trtllm_handler.json"
PROFILES = {"0.26.0-dlc": "lmi-0.26.0-trtllm-0.7.1", "0.27.0-dlc": "lmi-0.27.0-trtllm-0.8.0",
            "0.28.0-dlc": "lmi-0.28.0-trtllm-0.9.0", "0.29.0-dlc": "lmi-0.29.0-trtllm-0.11.0",
            "0.30.0-dlc": "lmi-0.30.0-trtllm-0.12.0", "0.31.0-dlc": "lmi-0.31.0-trtllm-0.12.0",
            "0.32.0-dlc": "lmi-0.32.0-trtllm-0.12.0", "0.33.0-dlc": "lmi-0.33.0-trtllm-0.21.0",
            "0.34.0-dlc": "lmi-0.34.0-trtllm-0.12.0", "0.35.0-dlc": "lmi-0.35.0-trtllm-1.0.0",
            "0.35.1-dlc": "lmi-0.35.1-trtllm-1.0.0", "v0.36.0": "lmi-0.36.0-trtllm-1.0.0"}
BRANCHES = tuple(PROFILES)
# 0.26's TensorRT-LLM 0.7.1 builds the llama example only (targets/trtllm/steps.py LEGACY_EXAMPLES): its 8
# fixtures x 5 option sets
BUILT_AT_LEAST = {"0.26.0-dlc": 40}
LOADERS = {"tensorrt_llm_toolkit.init_inference": "trtllm-toolkit", "tensorrt_llm.llmapi.LLM": "trtllm-llm-api"}
# lmi-build's resolved key -> the keyword DJL's LLM() call carries it under (0.33.0-dlc trt_properties.py
# get_llm_kwargs); the toolkit is handed the properties themselves, under their own names
LLM_KEYWORDS = {"tensor_parallel_degree": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
                "max_rolling_batch_size": "max_batch_size", "max_num_tokens": "max_num_tokens", "dtype": "dtype"}

# The reviewed differences: (branch, model, fields as JSON, what differs) -> the reason it is not a fault
# of lmi-build's output. Empty: every recorded entry agrees.
REVIEWED: dict[tuple[str, str, str, str], str] = {}


@cache
def _facts() -> dict[str, Any]:
    facts: dict[str, Any] = json.loads(FACTS.read_text())
    return facts


def _plan(profile: str, entry: dict[str, Any]) -> BuildPlan:
    fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                              for key, value in entry["fields"].items()}
    request = request_for("trtllm", {"model": str(FIXTURE_CONFIGS / entry["model"]), "profile": profile, "tp": "2",
                                     **fields}, env={})
    return plan_request(request, get_target("trtllm")).plan


def _detection(outcome: StartupOutcome) -> str:
    return next(rule.effect for rule in outcome.rules if rule.rule == "trtllm_detection")


def djl_values(handler: dict[str, Any]) -> dict[str, str]:
    """What DJL's loading call carries, under lmi-build's resolved keys, as strings."""
    loads = handler["loads"] or {}
    kwargs = loads.get("kwargs") or {}
    if loads.get("call") == "tensorrt_llm.llmapi.LLM":
        return {key: str(kwargs[keyword]) for key, keyword in LLM_KEYWORDS.items() if keyword in kwargs}
    return {key: str(value) for key, value in kwargs.items()}


def differences(profile: str, entry: dict[str, Any], plan: BuildPlan) -> list[str]:
    """What DJL did with the built artifact that lmi-build's start-up model says otherwise."""
    handler = entry["handler"]
    build = plan.build
    assert isinstance(build, TrtllmBuild)
    if serving_properties(plan, written_layout("trtllm", profile, plan)) != entry["properties"]:
        return ["lmi-build writes other properties now: re-record"]
    outcome = trtllm_startup_model(profile, plan, entry["properties"])
    found = []
    if handler["detected"] != (_detection(outcome) == "resolves"):
        found.append(f"detection: DJL's isValidTrtLlmModelRepo {handler['detected']}, the model {_detection(outcome)}")
    for other, detected in handler["detected_by"].items():  # the artifact served on the other release
        other_profile = PROFILES[other]
        effect = _detection(trtllm_startup_model(profile, plan, entry["properties"], served_on=other_profile))
        if detected != (effect == "resolves"):
            found.append(f"detection on {other_profile}: DJL's isValidTrtLlmModelRepo {detected}, the model {effect}")
    loads = handler["loads"] or {}
    djl_loads = handler["detected"] and handler["outcome"] == "initialized" and loads.get("path") == "<artifact>"
    if djl_loads != (outcome.outcome == "loads"):
        found.append(f"outcome: the model {outcome.outcome}, DJL {handler['outcome']} {handler.get('error', '')} "
                     f"loading {loads.get('path')}")
    if handler["loads"] is None and handler["outcome"] == "raised":
        # the release raised before any loading call (0.35-0.36: its LLM() call itself is refused): the
        # model must say rejected for the same reason, and there is nothing loaded to compare
        if outcome.outcome != "rejected" or "got multiple values" not in " ".join(r.message for r in outcome.errors()):
            found.append(f"raised: DJL {handler.get('error')}, the model {outcome.outcome} without that defect")
        return found
    if LOADERS.get(loads.get("call", "")) != outcome.loader:
        found.append(f"loader: the model {outcome.loader}, DJL calls {loads.get('call')}")
    djl = djl_values(handler)
    for key in sorted(outcome.resolved.keys() & djl.keys()):
        if outcome.resolved[key] != djl[key]:
            found.append(f"{key}: the model resolves {outcome.resolved[key]}, DJL passes {djl[key]}")
    pp = djl.get("pipeline_parallel_size", djl.get("pipeline_parallel_degree", "1"))
    if (djl.get("tensor_parallel_degree"), pp) != (str(build.tp), str(build.pp)):
        found.append(f"world size: DJL starts tp {djl.get('tensor_parallel_degree')} x pp {pp}, "
                     f"the engine is tp {build.tp} x pp {build.pp}")
    return found


def test_the_facts_name_branch_commit_and_what_was_executed() -> None:
    branches = _facts()["branches"]
    assert tuple(b["branch"] for b in branches) == BRANCHES
    assert {b["branch"]: b["profile"] for b in branches} == PROFILES
    for branch in branches:
        assert len(branch["commit"]) == 40 and "isValidTrtLlmModelRepo" in branch["executed"]
        assert sum("handler" in entry for entry in branch["entries"]) >= BUILT_AT_LEAST.get(branch["branch"], 50), \
            branch["branch"]


@pytest.mark.parametrize("branch_name", BRANCHES)
def test_the_start_up_model_agrees_with_the_executed_release(branch_name: str) -> None:
    branch = next(b for b in _facts()["branches"] if b["branch"] == branch_name)
    found: list[str] = []
    for entry in branch["entries"]:
        plan = _plan(branch["profile"], entry)
        fields = json.dumps(entry["fields"], sort_keys=True)
        if "handler" not in entry:
            if plan.valid:
                found.append(f"{branch_name} {entry['model']} {fields}: lmi-build plans it valid now: re-record")
            continue
        if not plan.valid:
            found.append(f"{branch_name} {entry['model']} {fields}: lmi-build refuses it now, it was built: re-record")
            continue
        for difference in differences(branch["profile"], entry, plan):
            if (branch_name, entry["model"], fields, difference.split(":")[0]) not in REVIEWED:
                found.append(f"{branch_name} {entry['model']} {fields}: {difference}")
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:25])


SAMPLE = "meta-llama--Llama-2-7b-hf"


@pytest.mark.parametrize("branch_name", BRANCHES)
def test_verify_for_container_agrees_with_the_executed_release(branch_name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify --for-container``'s start-up model on one model's artifacts, built again as the script
    built them: the loader DJL called, "loads" where DJL loaded, engine files inside the directory
    DJL loads, and the values DJL passed."""
    from lmi_build.artifact.manifest import load_manifest
    from lmi_build.artifact.verify import serving_target
    from lmi_build.reporting.output import Mode, set_mode
    from lmi_build.targets import TARGETS
    from lmi_build.targets.trtllm.profiles import get_profile
    from tests.paths import STANDINS_DIR
    from tests.vendor.djl.execute_trtllm_handler import build

    branch = next(b for b in _facts()["branches"] if b["branch"] == branch_name)
    profile = branch["profile"]
    monkeypatch.setenv("PATH", f"{STANDINS_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_MODE", "ok")
    monkeypatch.setenv("STANDIN_TRTLLM_VERSION", get_profile(profile).tensorrt_llm)
    set_mode(Mode.QUIET)
    found: list[str] = []
    checked = 0
    for entry in (e for e in branch["entries"] if e["model"] == SAMPLE and "handler" in e):
        out = build(entry, profile, tmp_path)
        assert out is not None
        outcome = TARGETS["trtllm"].container_startup(load_manifest(out), serving_target(TARGETS, container=profile))
        assert outcome is not None
        handler, where = entry["handler"], f"{branch_name} {entry['fields']}"
        checked += 1
        if handler["loads"] is None and handler["outcome"] == "raised":  # the release's own defect (0.35-0.36)
            if outcome.outcome != "rejected":
                found.append(f"{where}: verify says {outcome.outcome}, DJL raised {handler.get('error')}")
            continue
        if LOADERS.get((handler["loads"] or {}).get("call", "")) != outcome.loader:
            found.append(f"{where}: verify says loader {outcome.loader}, DJL calls {handler['loads']}")
        if (outcome.outcome == "loads") != (handler["detected"] and handler["outcome"] == "initialized"):
            found.append(f"{where}: verify says {outcome.outcome}, DJL {handler}")
        if not outcome.loads or not all((out / engine).is_file() for engine in outcome.loads):
            found.append(f"{where}: verify's engines {outcome.loads} are not in the directory DJL loads")
        djl = djl_values(handler)
        wrong = {key: (value, djl[key]) for key, value in outcome.resolved.items() if key in djl and djl[key] != value}
        if wrong:
            found.append(f"{where}: verify resolves otherwise than DJL passes (verify, DJL): {wrong}")
    assert checked >= 4
    assert not found, "\n".join(found)
