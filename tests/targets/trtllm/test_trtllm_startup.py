"""One model of each LMI TensorRT-LLM release's start-up (issue 22, Deliver 1; ``targets/trtllm/startup.py``):
``verify --for-container`` reports the outcome (``loads`` with the engine files, ``rebuilds``, ``rejected``)
with the cited rule, and plan evaluates the same model on the artifact it will write.

Artifacts are packaged by the real packager from engines the trtllm-build STAND-IN writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.artifact.manifest import BuildRecord, Manifest, load_manifest
from lmi_build.artifact.packager import package
from lmi_build.artifact.verify import serving_target
from lmi_build.planning.startup import StartupOutcome
from lmi_build.reporting.output import Mode, set_mode
from lmi_build.runners import LocalRunner, run_steps
from lmi_build.targets import TARGETS
from lmi_build.targets.trtllm.layouts import layout_for
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.startup import evaluate, from_planned
from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths
from tests.cli_process import run_lmi_build
from tests.fixtures_trtllm import TrtllmPlanner, write_checkpoint, write_model_dir

P027, P030, P033 = "lmi-0.27.0-trtllm-0.8.0", "lmi-0.30.0-trtllm-0.12.0", "lmi-0.33.0-trtllm-0.21.0"


@pytest.fixture(autouse=True)
def _fresh_output() -> None:
    set_mode(Mode.HUMAN)


def _artifact(profile_name: str, trtllm_plan: TrtllmPlanner, tmp_path: Path, standin_path: Callable[..., None],
              tp: int = 2, **request: Any) -> Path:
    """An artifact of ``profile_name``'s layout: the plan's engine step run by the stand-in, packaged."""
    profile = get_profile(profile_name)
    standin_path(profile.tensorrt_llm)
    plan = trtllm_plan(profile_name, tp=str(tp), **request)
    paths = trtllm_paths(model=write_model_dir(tmp_path / "model"), checkpoint=write_checkpoint(tmp_path / "ckpt", tp=tp),
                         engine=tmp_path / "engine")
    run_steps(plan_steps(plan, profile).steps[-1:], LocalRunner(gpus=1), tmp_path / "work", paths, plan)
    return package(plan, target=TARGETS["trtllm"], layout=layout_for(profile.layout), produced=paths.engine,  # type: ignore[arg-type]
                   source_dir=paths.model, output_dir=tmp_path / "artifact", record=BuildRecord())


def _startup(manifest: Manifest, container: str) -> StartupOutcome:
    outcome = TARGETS["trtllm"].container_startup(manifest, serving_target(TARGETS, container=container))
    assert outcome is not None
    return outcome


def _edited(manifest: Manifest, drop: tuple[str, ...] = (), build: dict[str, Any] | None = None,
            files_without: str | None = None, **values: str) -> Manifest:
    """The manifest with serving.properties edited (``option__x="1"`` sets option.x), the plan's engine
    knobs changed (``build``), or a file left out of the file list."""
    properties = {k: v for k, v in manifest.serving_properties.items() if k not in drop}
    properties.update({key.replace("__", "."): value for key, value in values.items()})
    plan = dict(manifest.plan)
    if build:
        plan["build"] = {**plan["build"], **build}
    files = [f for f in manifest.files if f.path != files_without]
    return manifest.model_copy(update={"serving_properties": properties, "plan": plan, "files": files})


def _rule(outcome: StartupOutcome, rule: str) -> Any:
    found = [r for r in outcome.rules if r.rule == rule]
    assert found, [r.rule for r in outcome.rules]
    return found[0]


@pytest.mark.parametrize("profile_name", [P030, P033])
def test_artifact_loads_on_its_own_release(profile_name: str, trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                           standin_path: Callable[..., None]) -> None:
    out = _artifact(profile_name, trtllm_plan, tmp_path, standin_path)
    served = json.loads(run_lmi_build("verify", str(out), "--for-container", profile_name, "--json").stdout)
    startup: dict[str, Any] = served["startup"]
    engines = sorted(p.relative_to(out).as_posix() for p in out.rglob("rank*.engine"))
    assert startup["outcome"] == "loads" and startup["loads"] == engines and len(engines) == 2
    assert startup["profile"] == profile_name and startup["resolved"]["tensor_parallel_degree"] == "2"
    assert startup["resolved"]["max_rolling_batch_size"] == load_manifest(out).serving_properties[
        "option.max_rolling_batch_size"]
    assert all(rule["effect"] == "resolves" and rule["sources"] for rule in startup["rules"])
    detection = next(rule for rule in startup["rules"] if rule["rule"] == "trtllm_detection")
    branch = "0.30.0-dlc (fefd40ec)" if profile_name == P030 else "0.33.0-dlc (8b3b685b)"
    assert any(branch in source and "isValidTrtLlmModelRepo" in source for source in detection["sources"])
    # The start-up model adds no error to an artifact built for the release (packaged without the
    # build's record, so no stand-in error either).
    assert served["errors"] == [] and served["valid"]
    human = run_lmi_build("verify", str(out), "--for-container", profile_name)
    assert f"container start-up on {profile_name}: loads (loader " in (human.stdout + human.stderr)
    assert "2 engine files)" in (human.stdout + human.stderr)


def test_toolkit_mismatches_give_the_release_outcome_with_its_rule(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                                                   standin_path: Callable[..., None]) -> None:
    manifest = load_manifest(_artifact(P030, trtllm_plan, tmp_path, standin_path))
    assert _startup(manifest, P030).outcome == "loads"

    # tp: engine=MPI starts 4 ranks for a world-size-2 engine; the runtime refuses the MPI size.
    tp = _startup(_edited(manifest, option__tensor_parallel_degree="4"), P030)
    assert tp.outcome == "rejected" and tp.deciding()[0].rule == "trtllm_world_size"
    assert "worldConfig.cpp" in " ".join(tp.deciding()[0].sources)
    assert tp.summary().startswith(f"container start-up on {P030}: rejected: ")

    # max_batch_size < max_rolling_batch_size: loads, but batches at most the engine's (an error).
    batch = _startup(_edited(manifest, build={"max_batch_size": 64}), P030)
    rule = _rule(batch, "trtllm_max_batch_size")
    assert rule.effect == "degrades" and "engine 64 < serving.properties 256" in rule.message
    assert batch.outcome == "loads" and batch.errors() == (rule,)

    # dtype: the engine is float16, serving.properties says bf16: served as built.
    dtype = _startup(_edited(manifest, option__dtype="bf16"), P030)
    assert _rule(dtype, "trtllm_engine_dtype").effect == "degrades"
    assert "dtype: engine float16, serving.properties bfloat16" in _rule(dtype, "trtllm_engine_dtype").message

    # No tokenizer_config.json beside config.pbtxt: not detected, the container JIT-builds.
    undetected = _startup(_edited(manifest, files_without="tensorrt_llm/tokenizer_config.json"), P030)
    assert undetected.outcome == "rebuilds" and undetected.deciding()[0].rule == "trtllm_detection"
    assert "LmiUtils.java:130-131,481-499" in " ".join(undetected.deciding()[0].sources)

    # A rolling batch other than trtllm: DJL does not take its TensorRT-LLM path.
    other = _startup(_edited(manifest, option__rolling_batch="vllm"), P030)
    assert other.outcome == "rejected" and other.deciding()[0].rule == "trtllm_path"

    # A rank engine file missing from the artifact.
    cut = _startup(_edited(manifest, files_without="tensorrt_llm/1/rank1.engine"), P030)
    assert cut.outcome == "rejected" and cut.deciding()[0].rule == "trtllm_engine_ranks"

    # The engines of another release: TensorRT-LLM 0.12.0 engines on 0.27's 0.8.0 (and 0.27's layout
    # would find them: both are toolkit releases).
    older = _startup(manifest, P027)
    assert older.outcome == "rejected" and _rule(older, "trtllm_engine_version").effect == "rejected"


def test_recommender_fills_the_release_batch(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                             standin_path: Callable[..., None]) -> None:
    """No option.max_rolling_batch_size: the release's recommender fills 256 (and max_num_tokens
    16384) at 0.30 for rolling_batch=trtllm, which the default plan's engine has (finding 1)."""
    manifest = load_manifest(_artifact(P030, trtllm_plan, tmp_path, standin_path))
    unset = _startup(_edited(manifest, drop=("option.max_rolling_batch_size", "option.max_num_tokens")), P030)
    assert unset.resolved["max_rolling_batch_size"] == "256" and unset.resolved["max_num_tokens"] == "16384"
    assert unset.outcome == "loads" and not unset.errors()
    assert "LmiConfigRecommender.java @ 0.30.0-dlc" in " ".join(_rule(unset, "trtllm_recommender").sources)
    # An engine built for 32 (0.27's default) is below what 0.30 fills in.
    small = _startup(_edited(manifest, drop=("option.max_rolling_batch_size",), build={"max_batch_size": 32}), P030)
    assert _rule(small, "trtllm_max_batch_size").effect == "degrades"


def test_flat_release_llm_arguments(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                    standin_path: Callable[..., None]) -> None:
    manifest = load_manifest(_artifact(P033, trtllm_plan, tmp_path, standin_path))
    # LLM(tensor_parallel_size=4) on a tp-2 engine: ValueError; tensor_parallel_size=1 takes the engine's.
    four = _startup(_edited(manifest, option__tensor_parallel_degree="4"), P033)
    assert four.outcome == "rejected" and four.deciding()[0].rule == "trtllm_llm_parallel"
    assert "tp_size 4 is not consistent with the engine's tp_size 2" in four.deciding()[0].message
    assert _startup(_edited(manifest, option__tensor_parallel_degree="1"), P033).outcome == "loads"
    # pipeline_parallel_size is the key the service reads (finding 8).
    pp = _startup(_edited(manifest, option__pipeline_parallel_size="2"), P033)
    assert pp.outcome == "rejected" and "pp_size 2" in pp.deciding()[0].message
    # The recommender fills 32 for rolling_batch=disable: an engine of 256 serves 32 at a time, and loads.
    unset = _startup(_edited(manifest, drop=("option.max_rolling_batch_size",)), P033)
    assert unset.resolved["max_rolling_batch_size"] == "32" and unset.outcome == "loads"


def test_layout_of_another_release_rebuilds(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                            standin_path: Callable[..., None]) -> None:
    toolkit = load_manifest(_artifact(P030, trtllm_plan, tmp_path / "toolkit", standin_path))
    flat = load_manifest(_artifact(P033, trtllm_plan, tmp_path / "flat", standin_path))
    on_flat = _startup(toolkit, P033)
    assert on_flat.outcome == "rebuilds" and "has no config.json" in on_flat.deciding()[0].message
    # The flat layout's serving.properties says rolling_batch=disable: 0.30 does not take its
    # TensorRT-LLM path at all; with rolling_batch=trtllm it does, and finds no model repo.
    on_toolkit = _startup(flat, P030)
    assert on_toolkit.outcome == "rejected" and on_toolkit.deciding()[0].rule == "trtllm_path"
    trtllm = _startup(_edited(flat, option__rolling_batch="trtllm"), P030)
    assert trtllm.outcome == "rebuilds" and "config.pbtxt and tokenizer_config.json" in trtllm.deciding()[0].message
    verified = json.loads(run_lmi_build("verify", str(tmp_path / "toolkit" / "artifact"), "--for-container",
                                                   P033, "--json").stdout)
    assert verified["startup"]["outcome"] == "rebuilds" and not verified["valid"]
    assert "trtllm_detection" in [e["code"] for e in verified["errors"]]


def test_plan_evaluates_the_same_model(trtllm_plan: TrtllmPlanner) -> None:
    """Every release: a default plan's artifact loads on its own release (its defaults are the
    container's), but where the release's own service refuses every start (0.35-0.36, executed: the
    profile's runtime_defect), which the plan warns about; the plan's planned artifact on a release of
    the other layout rebuilds."""
    from lmi_build.planning.plan import BuildPlan
    from lmi_build.targets.trtllm.knobs import TrtllmBuild
    from lmi_build.targets.trtllm.profiles import load_profiles

    def planned(plan: BuildPlan, profile_name: str) -> StartupOutcome:
        return evaluate(get_profile(profile_name), from_planned(
            plan.options, plan.option_sources, plan.knobs(TrtllmBuild), plan.quantization, get_profile(plan.toolchain.profile)))

    for profile in load_profiles():
        plan = trtllm_plan(profile.name, tp="2")
        outcome = planned(plan, profile.name)
        if profile.startup.runtime_defect:
            assert [r.rule for r in outcome.errors()] == ["trtllm_runtime"], profile.name
            assert plan.valid and "trtllm_runtime" in [w.code for w in plan.warnings]
            continue
        assert outcome.outcome == "loads", (profile.name, outcome.errors())
    assert planned(trtllm_plan(P030, tp="2"), P033).outcome == "rebuilds"


def test_plan_refuses_what_the_release_rejects(plan_model: Callable[..., Any]) -> None:
    """option.backend=pytorch on the flat releases: DJL does not take its engine path."""
    flat = plan_model("trtllm", "meta-llama--Llama-2-7b-hf", profile=P033, tp="2", option=("backend=pytorch",))
    assert not flat.valid and "trtllm_path" in [e.code for e in flat.errors]


def test_an_engine_of_0_30s_tensorrt_is_refused_by_0_32(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                                        standin_path: Callable[..., None]) -> None:
    """0.30 and 0.32 both run TensorRT-LLM 0.12.0, but 0.30's image has TensorRT 10.3.0 and 0.32's 10.1.0
    (tests/vendor/djl/container_facts.json): 0.30's engines do not load on 0.32, and verify says why."""
    out = _artifact(P030, trtllm_plan, tmp_path, standin_path)
    on_032 = _startup(load_manifest(out), "lmi-0.32.0-trtllm-0.12.0")
    refusal = _rule(on_032, "trtllm_engine_version")
    assert on_032.outcome == "rejected" and refusal.effect == "rejected"
    assert "TensorRT 10.3.0" in refusal.message and "TensorRT 10.1.0" in refusal.message
    served = json.loads(run_lmi_build("verify", str(out), "--for-container", "lmi-0.32.0-trtllm-0.12.0", "--json").stdout)
    assert not served["valid"] and served["startup"]["outcome"] == "rejected"
    assert [e["code"] for e in served["errors"]] == ["version_tensorrt"]
    assert "TensorRT 10.3.0" in served["errors"][0]["message"] and "10.1.0" in served["errors"][0]["message"]
    assert _startup(load_manifest(out), P030).outcome == "loads"
