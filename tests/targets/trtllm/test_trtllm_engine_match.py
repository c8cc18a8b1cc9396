"""The engine is what serving.properties says: an engine's config.json (written by the trtllm-build
STAND-IN, laid out as the real tool writes it) against the plan and against serving.properties."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import StepError
from lmi_build.runners import LocalRunner, run_steps
from lmi_build.targets.trtllm.build import _check_engine_is_the_plans
from lmi_build.targets.trtllm.engine_match import (
    engine_mismatches,
    expectation_from_plan,
    expectation_from_properties,
)
from lmi_build.targets.trtllm.layouts import FLAT
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths
from tests.fixtures_trtllm import TrtllmPlanner, write_checkpoint

PROFILE = "lmi-0.30.0-trtllm-0.12.0"


def _standin_engine(plan: Any, tmp_path: Path, standin_path: Callable[..., None]) -> Path:
    standin_path(get_profile(PROFILE).tensorrt_llm)
    step = plan_steps(plan, get_profile(PROFILE)).steps[-1]
    (tmp_path / "model").mkdir()
    paths = trtllm_paths(model=tmp_path / "model", checkpoint=write_checkpoint(tmp_path / "ckpt", tp=1),
                         engine=tmp_path / "engine")
    run_steps([step], LocalRunner(gpus=1), tmp_path / "work", paths, plan)
    return tmp_path / "engine"


def test_engine_of_the_plan_matches_and_another_plans_is_refused(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                                                 standin_path: Callable[..., None]) -> None:
    plan = trtllm_plan(PROFILE, tp="1")
    engine = _standin_engine(plan, tmp_path, standin_path)
    config = json.loads((engine / "config.json").read_text())
    assert engine_mismatches(config, expectation_from_plan(plan)) == []
    _check_engine_is_the_plans(engine, plan)

    other = trtllm_plan(PROFILE, tp="1", max_input_len=2048, max_batch_size=512, option=("tokens_per_block=64",))
    problems = engine_mismatches(config, expectation_from_plan(other))
    assert "max_input_len: engine 1024, the plan 2048" in problems
    assert "max_batch_size: engine 256 < the plan 512 (max_rolling_batch_size)" in problems
    assert "tokens_per_block: engine 128, the plan 64" in problems
    assert any(p.startswith("max_seq_len: engine 1536") for p in problems)
    with pytest.raises(StepError, match=r"was not built for this plan: .*max_input_len: engine 1024, the plan 2048"):
        _check_engine_is_the_plans(engine, other)


def test_quantization_and_world_size_against_serving_properties() -> None:
    config = {"build_config": {"max_batch_size": 32, "max_input_len": 1024, "max_seq_len": 1536,
                               "plugin_config": {"tokens_per_block": 64}},
              "pretrained_config": {"mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1},
                                    "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None}}}
    good = {"option.max_rolling_batch_size": "32", "option.max_input_len": "1024", "option.tokens_per_block": "64",
            "option.quantize": "fp8", "option.tensor_parallel_degree": "2"}
    assert engine_mismatches(config, expectation_from_properties(good)) == []
    bad = {**good, "option.max_rolling_batch_size": "64", "option.quantize": "smoothquant",
           "option.kv_cache_dtype": "fp8", "option.tensor_parallel_degree": "4"}
    problems = engine_mismatches(config, expectation_from_properties(bad))
    assert "quant_algo: engine FP8, serving.properties W8A8_SQ" in problems
    assert "kv_cache_quant_algo: engine none, serving.properties FP8" in problems
    assert "world size: engine 2, serving.properties 4" in problems
    assert "max_batch_size: engine 32 < serving.properties 64 (max_rolling_batch_size)" in problems
    # A pre-quantized model's artifact may leave option.quantize unset: nothing to compare.
    unset = {k: v for k, v in good.items() if k != "option.quantize"}
    assert engine_mismatches(config, expectation_from_properties(unset)) == []


def test_verify_refuses_an_artifact_whose_properties_disagree_with_its_engine(tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "config.json").write_text(json.dumps({
        "version": "0.21.0rc1", "build_config": {"max_batch_size": 8, "max_input_len": 512,
                                                  "plugin_config": {"tokens_per_block": 32}},
        "pretrained_config": {"mapping": {"world_size": 1}}}))
    (artifact / "rank0.engine").write_bytes(b"x")
    (artifact / "tokenizer.json").write_text("{}")
    (artifact / "serving.properties").write_text("engine=MPI\noption.max_rolling_batch_size=8\n"
                                                 "option.max_input_len=512\noption.tensor_parallel_degree=1\n")
    assert FLAT.check(artifact) == []
    (artifact / "serving.properties").write_text("engine=MPI\noption.max_rolling_batch_size=16\n"
                                                 "option.max_input_len=4096\noption.tensor_parallel_degree=1\n")
    messages = [m.message for m in FLAT.check(artifact) if m.code == "engine_properties"]
    assert "engine and serving.properties disagree: max_input_len: engine 512, serving.properties 4096" in messages
    assert any("max_batch_size: engine 8 < serving.properties 16" in m for m in messages)
