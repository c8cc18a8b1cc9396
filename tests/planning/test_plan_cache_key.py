"""Cache-key properties: deterministic, sensitive to every input that lands in the artifact (build
knobs and the serving options written into serving.properties), blind to where a value came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_planning import ModelDirFactory, Planner

LLAMA = "meta-llama--Llama-2-7b-hf"


@pytest.fixture
def llama(model_dir: ModelDirFactory) -> Path:
    return model_dir(LLAMA)


def test_same_inputs_same_key(plan_model: Planner, llama: Path) -> None:
    first = plan_model("trtllm", llama, tp="2", quantize="awq")
    second = plan_model("trtllm", llama, tp="2", quantize="awq")
    assert first.cache_key == second.cache_key
    assert first == second


@pytest.mark.parametrize(
    "change",
    [
        {"tp": "2"},
        {"dtype": "bf16"},
        {"max_input_len": 2048},
        {"max_output_len": 256},
        {"max_batch_size": 8},
        {"quantize": "smoothquant"},
        {"quantize": "awq"},
        {"option": ("option.tokens_per_block=128",)},
        {"option": ("option.enable_kv_cache_reuse=true",)},
        {"option": ("option.use_fused_mlp=true",)},
        {"profile": "lmi-0.27.0-trtllm-0.8.0"},
    ],
    ids=lambda change: ",".join(f"{k}={v}" for k, v in change.items()),
)
def test_each_build_relevant_change_changes_the_key(plan_model: Planner, llama: Path, change: dict[str, Any]) -> None:
    base = plan_model("trtllm", llama)
    changed = plan_model("trtllm", llama, **change)
    assert changed.cache_key != base.cache_key


def test_target_config_and_calibration_change_the_key(plan_model: Planner, model_dir: ModelDirFactory,
                                                      llama: Path, tmp_path: Path) -> None:
    assert plan_model("hf", llama).cache_key != plan_model("trtllm", llama).cache_key
    # Same directory name, a different config.json.
    other = model_dir(LLAMA, dirname="other/" + LLAMA, rope_theta=500000.0)
    assert plan_model("trtllm", other).cache_key != plan_model("trtllm", llama).cache_key
    calib = tmp_path / "calib.txt"
    calib.write_text("\n".join(f"calibration sample number {i} about planning" for i in range(40)))
    builtin = plan_model("trtllm", llama, quantize="awq")
    custom = plan_model("trtllm", llama, quantize="awq", calib_data=calib)
    assert custom.quantization.calibration is not None
    assert custom.cache_key != builtin.cache_key


def test_neuronx_compiler_flags_change_the_key(plan_model: Planner, llama: Path) -> None:
    base = plan_model("neuronx", llama)
    assert plan_model("neuronx", llama, option=("option.neuron_optimize_level=3",)).cache_key != base.cache_key
    assert plan_model("neuronx", llama, env={"NEURON_CC_FLAGS": "-O1"}).cache_key != base.cache_key
    assert plan_model("neuronx", llama, n_positions="2048").cache_key != base.cache_key


@pytest.mark.parametrize("option", ["job_queue_size=100", "option.model_loading_timeout=3600",
                                    "option.output_formatter=jsonlines", "option.kv_cache_free_gpu_mem_fraction=0.8"])
def test_runtime_only_options_change_the_key(plan_model: Planner, llama: Path, option: str) -> None:
    """A runtime option builds the same engine but another serving.properties: reusing the artifact
    under the old key served the other build's options (issue: stale artifacts from the cache)."""
    base = plan_model("trtllm", llama)
    changed = plan_model("trtllm", llama, option=(option,))
    assert changed.options != base.options  # the option is carried into serving.properties...
    assert changed.cache_key != base.cache_key  # ...so the artifact is another one


def test_order_and_source_do_not_matter(plan_model: Planner, llama: Path, tmp_path: Path) -> None:
    flags = plan_model("trtllm", llama, tp="2", option=("option.tokens_per_block=128", "option.max_input_len=2048"))
    reordered = plan_model("trtllm", llama, tp="2", option=("option.max_input_len=2048", "option.tokens_per_block=128"))
    properties = tmp_path / "serving.properties"
    properties.write_text("option.max_input_len=2048\noption.tokens_per_block=128\noption.tensor_parallel_degree=2\n")
    from_file = plan_model("trtllm", llama, properties=properties)
    from_env = plan_model("trtllm", llama, env={"OPTION_TOKENS_PER_BLOCK": "128", "OPTION_MAX_INPUT_LEN": "2048",
                                                "TENSOR_PARALLEL_DEGREE": "2"})
    assert flags.cache_key == reordered.cache_key == from_file.cache_key == from_env.cache_key
    assert from_env.option_sources["option.tokens_per_block"] == "env"
    assert from_file.option_sources["option.tokens_per_block"] == "properties"


def test_key_does_not_depend_on_the_host_path(plan_model: Planner, model_dir: ModelDirFactory, tmp_path: Path) -> None:
    here = model_dir(LLAMA)
    there = model_dir(LLAMA, dirname="elsewhere/deeper/" + LLAMA)
    assert plan_model("hf", here).cache_key == plan_model("hf", there).cache_key
