"""One model of each LMI Neuron release's start-up (issue 21, Deliver 1; ``targets/neuronx/startup.py``):
``verify --for-container`` reports the outcome (``loads`` with the NEFFs, ``recompiles``, ``rejected``)
with the cited rule, and plan evaluates the same model on the artifact it will write."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.artifact.verify import serving_target
from lmi_build.planning.startup import StartupOutcome
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.profiles import get_profile
from lmi_build.targets.neuronx.startup import evaluate, from_manifest, from_planned
from tests.cli_process import run_lmi_build
from tests.fixtures_neuronx import write_neuron_model
from tests.fixtures_planning import plan_for

P028, P029, P030 = "lmi-0.28.0-neuronx-sdk2.18.2", "lmi-0.29.0-neuronx-sdk2.19.1", "lmi-0.30.0-neuronx-sdk2.20.1"


def _build(tmp_path: Path, model: Path, *extra: str, profile: str = P030) -> Path:
    out = tmp_path / "out"
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                      "--profile", profile, *extra, "--output", str(out), "--quiet")
    assert result.returncode == 0, (result.stdout + result.stderr)
    return out


def _startup(manifest: Manifest, container: str) -> StartupOutcome:
    outcome = TARGETS["neuronx"].container_startup(manifest, serving_target(TARGETS, container=container))
    assert outcome is not None
    return outcome


def _edited(manifest: Manifest, drop: tuple[str, ...] = (), **values: str) -> Manifest:
    properties = {k: v for k, v in manifest.serving_properties.items() if k not in drop}
    properties.update({key.replace("__", "."): value for key, value in values.items()})
    return manifest.model_copy(update={"serving_properties": properties})


def test_each_finding_artifact_gives_the_release_outcome_with_its_rule(tmp_path: Path,
                                                                       neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    static = load_manifest(_build(tmp_path / "static", write_neuron_model(tmp_path / "llama"), "--option",
                                  "option.batch_size=4"))
    assert _startup(static, P030).outcome == "loads"
    # Finding 1: no option.rolling_batch -> auto (rolling batch) on 0.30, and no NEFF for batch 32.
    auto = _startup(_edited(static, drop=("option.rolling_batch", "option.batch_size", "batch_size"),
                            option__max_rolling_batch_size="32"), P030)
    assert auto.outcome == "rejected" and auto.deciding()[0].rule == "neuron_batching"
    assert any("base.py:775-785" in source for source in auto.deciding()[0].sources)
    # Finding 2: option.batch_size next to rolling batch: DJL's validator.
    both = _startup(_edited(static, drop=("batch_size",), option__rolling_batch="auto"), P030)
    assert both.outcome == "rejected" and "cannot be enabled at the same time" in both.deciding()[0].message
    # Finding 6: the server batch is not the NEFFs': it loads, one request a pass (an error, cited).
    server = _startup(_edited(static, batch_size="1"), P030)
    assert server.outcome == "loads" and [r.effect for r in server.errors()] == ["degrades"]
    assert "ModelInfo.java:864-867" in server.errors()[0].sources[0]
    # Finding 11: a draft model -> the container compiles the speculation kernels.
    draft = _startup(_edited(static, option__speculative_draft_model="s3://bucket/draft/"), P030)
    assert draft.outcome == "recompiles" and draft.deciding()[0].rule == "neuron_refused_option"
    # Finding 12: on_device_embedding=false on 0.30: presharded weights assert.
    embedding = _startup(_edited(static, option__on_device_embedding="false"), P030)
    assert embedding.outcome == "rejected" and embedding.deciding()[0].sources == (
        get_profile(P030).on_device_embedding_sources)
    for outcome in (auto, both, draft, embedding):
        line = outcome.summary()
        assert line.startswith(f"container start-up on {P030}: {outcome.outcome}: ") and line.endswith("]")


def test_rope_outcome_per_release(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    """Finding 8 through the one model: 0.28's transformers rejects llama3 rope_scaling; 0.29's
    transformers-neuronx 0.11.351 ignores it (unscaled RoPE: degrades, issue 42 item 8)."""
    neuron_standin(neuronx_cc="2.16.372.0")
    model = write_neuron_model(tmp_path / "llama3")
    config = json.loads((model / "config.json").read_text())
    config.update(rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                  max_position_embeddings=131072)
    (model / "config.json").write_text(json.dumps(config))
    manifest = load_manifest(_build(tmp_path, model, profile="lmi-0.32.0-neuronx-sdk2.21.1"))
    rejected = _startup(manifest, P028)
    rope = next(r for r in rejected.rules if r.rule == "neuron_rope_scaling")
    assert rejected.outcome == "rejected" and rope.effect == "rejected" and "two fields" in rope.message
    ignored = next(r for r in _startup(manifest, P029).rules if r.rule == "neuron_rope_scaling")
    assert ignored.effect == "degrades" and ignored.sources == get_profile(P029).rope_scaling_sources
    assert "unscaled RoPE" in ignored.message
    # (A 0.32 artifact on 0.29 is rejected anyway: 0.29 passes no on_device_embedding, its NEFFs have it.)

@pytest.mark.parametrize("extra", [(), ("--max-batch-size", "4"), ("--option", "option.batch_size=4")])
def test_plan_and_verify_evaluate_the_same_startup(extra: tuple[str, ...], tmp_path: Path,
                                                   neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    out = _build(tmp_path, model, *extra)
    manifest = load_manifest(out)
    plan = plan_for("neuronx", model=str(model), tp="2", n_positions="1024", profile=P030,
                    **({"max_batch_size": 4} if "--max-batch-size" in extra else {}),
                    **({"option": ("option.batch_size=4",)} if "--option" in extra else {}))
    profile = get_profile(P030)
    planned = evaluate(profile, from_planned(plan.options, plan.option_sources, plan.knobs(NeuronxBuild), plan.spec,
                                             profile.neuron_cc_flags))
    verified = evaluate(profile, from_manifest(manifest))
    assert planned.model_dump(exclude={"loads"}) == verified.model_dump(exclude={"loads"})
    assert planned.outcome == verified.outcome == "loads" and verified.loads
    # verify prints the outcome (every corpus artifact's is checked in test_neuronx_corpus.py, from --json)
    human = run_lmi_build("verify", str(out), "--for-container", P030)
    assert f"container start-up on {P030}: loads (loader tnx, {len(verified.loads)} NEFFs)" in (human.stdout + human.stderr)


def test_plan_is_invalid_where_the_model_says_rejected_or_recompiles(tmp_path: Path) -> None:
    model = write_neuron_model(tmp_path / "llama")
    plan = plan_for("neuronx", model=str(model), tp="2", n_positions="1024", profile=P030,
                    option=("option.speculative_draft_model=s3://bucket/draft/",))
    profile = get_profile(P030)
    outcome = evaluate(profile, from_planned(plan.options, plan.option_sources, plan.knobs(NeuronxBuild), plan.spec,
                                             profile.neuron_cc_flags))
    assert outcome.outcome == "recompiles" and not plan.valid
    assert {r.rule for r in outcome.deciding()} <= {e.code for e in plan.errors}


def test_vllm_loader_under_vllm_rolling_batch_compiles_at_startup(tmp_path: Path,
                                                                 neuron_standin: Callable[..., None]) -> None:
    """option.model_loader=vllm with option.rolling_batch=vllm: DJL loads nothing and hands the model id to
    vLLM, which compiles (transformers_neuronx.py load_model; DJL's validate_partition_model_loader refuses AOT
    for that loader): no shipped NEFF is loaded on any release that has the loader. Without model_loader=vllm
    the same rolling batch loads the NEFFs with transformers-neuronx (preloaded_model)."""
    neuron_standin()
    model = write_neuron_model(tmp_path / "llama")
    rolling = load_manifest(_build(tmp_path, model, "--option", "option.rolling_batch=vllm", "--max-batch-size", "4"))
    cited = {P028: "0.28.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:176-177",
             P029: "0.29.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:178-179",
             P030: "0.30.0-dlc engines/python/setup/djl_python/transformers_neuronx.py:301-302"}
    assert _startup(rolling, P030).outcome == "loads"
    vllm = _edited(rolling, option__model_loader="vllm")
    outcome = _startup(vllm, P030)
    assert outcome.outcome == "recompiles" and [r.rule for r in outcome.deciding()] == ["neuron_loader_compiles"]
    assert outcome.summary().startswith(f"container start-up on {P030}: recompiles: {P030}: option.model_loader=vllm")
    for profile, cite in cited.items():  # (the 0.30 artifact is rejected on 0.28/0.29 for other reasons too)
        rule = next(r for r in _startup(vllm, profile).rules if r.rule == "neuron_loader_compiles")
        assert rule.effect == "recompiles" and any(cite in source for source in rule.sources), rule.sources
    # The plan says so too, and the build writes nothing (exit 2, the plan's error).
    plan = plan_for("neuronx", model=str(model), tp="2", n_positions="1024", profile=P030, max_batch_size=4,
                    option=("option.rolling_batch=vllm", "option.model_loader=vllm"))
    assert [e.code for e in plan.errors] == ["neuron_loader_compiles"]
    built = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "1024",
                                     "--max-batch-size", "4", "--option", "option.rolling_batch=vllm", "--option",
                                     "option.model_loader=vllm", "--output", str(tmp_path / "vllm"), "--quiet")
    assert built.returncode == 2 and "error: [neuron_loader_compiles]" in (built.stdout + built.stderr)
    assert not (tmp_path / "vllm").exists()
