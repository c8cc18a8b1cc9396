"""The checkpoint cache: keyed by exactly what decides a checkpoint, verified on every reuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmi_build.quantize.checkpoint_cache import CHECKPOINT_DIR, CheckpointCache, checkpoint_key
from tests.fixtures_quantize import make_build_plan

FAST_CALIB = {"calib_size": "6", "calib_max_seq_len": "64"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "cache"))


def _shaping(plan: Any) -> dict[str, Any]:
    from lmi_build.targets.trtllm.checkpoint import checkpoint_shaping
    from lmi_build.targets.trtllm.knobs import TrtllmBuild

    return checkpoint_shaping(plan.knobs(TrtllmBuild))


def _key(plan: Any, model_dir: Path) -> str:
    return checkpoint_key(plan, model_dir, "trtllm", _shaping(plan))[0]


@pytest.mark.slow  # tiny_llama3 is made with torch and transformers
def test_engine_knobs_do_not_change_the_key_but_calibration_and_shape_do(tiny_llama3: Path) -> None:
    plan = make_build_plan(tiny_llama3, method="fp8", options=FAST_CALIB, dtype="bfloat16")
    key = _key(plan, tiny_llama3)
    # Engine-only knobs and the container profile's serving options: same checkpoint.
    engine_only = plan.model_copy(update={
        "build": plan.build.model_copy(update={"max_batch_size": 64, "max_input_len": 1024}),
        "options": {**plan.options, "option.max_rolling_batch_size": "64"},
        "cache_key": "sha256:other"})
    assert _key(engine_only, tiny_llama3) == key
    changed = {
        "calibration seed": make_build_plan(tiny_llama3, method="fp8", options={**FAST_CALIB, "calib_seed": "7"},
                                            dtype="bfloat16"),
        "calibration size": make_build_plan(tiny_llama3, method="fp8", options={**FAST_CALIB, "calib_size": "5"},
                                            dtype="bfloat16"),
        "method": make_build_plan(tiny_llama3, method="awq", options=FAST_CALIB, dtype="bfloat16"),
        "dtype": make_build_plan(tiny_llama3, method="fp8", options=FAST_CALIB, dtype="float16"),
        "tp": make_build_plan(tiny_llama3, method="fp8", options=FAST_CALIB, dtype="bfloat16", tp=2),
    }
    keys = {name: _key(p, tiny_llama3) for name, p in changed.items()}
    assert key not in keys.values() and len(set(keys.values())) == len(keys), keys
    assert checkpoint_key(plan, tiny_llama3, "hf:modelopt_hf", _shaping(plan))[0] != key  # another format


@pytest.mark.slow  # tiny_llama3 is made with torch and transformers
def test_changed_input_weights_change_the_key(tiny_llama3: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / tiny_llama3.name
    shutil.copytree(tiny_llama3, copy)
    plan = make_build_plan(copy, method="int8_wo")
    key = _key(plan, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-2] + bytes([data[-2] ^ 1, data[-1]]))  # same size, new content
    assert _key(plan, copy) != key


@pytest.mark.slow
def test_rerun_reuses_the_verified_checkpoint_and_a_corrupt_entry_is_rebuilt(tiny_llama3: Path,
                                                                            tmp_path: Path) -> None:
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint

    plan = make_build_plan(tiny_llama3, method="int8_wo")
    first = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "a", use_cache=True)
    assert not first.cached
    engine_only = plan.model_copy(update={"build": plan.build.model_copy(update={"max_batch_size": 64})})
    second = build_trtllm_checkpoint(engine_only, tiny_llama3, tmp_path / "b", use_cache=True)
    assert second.cached and second.out_dir == tmp_path / "b"
    assert second.quant_algo == first.quant_algo == "W8A16" and second.files == first.files
    for name in first.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    # Corrupt the cached weights in place: the next reuse re-hashes, evicts and quantizes afresh.
    entry = CheckpointCache().entry_dir(_key(plan, tiny_llama3))
    shard = entry / CHECKPOINT_DIR / "rank0.safetensors"
    shard.unlink()  # break the hard link first: the checkpoints in a/ and b/ stay intact
    shard.write_bytes(b"\0" * 64)
    third = build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "c", use_cache=True)
    assert not third.cached
    assert (tmp_path / "c" / "rank0.safetensors").read_bytes() == (tmp_path / "a" / "rank0.safetensors").read_bytes()
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["quantization"]["quant_algo"] == "W8A16"
    # Without the cache nothing is reused (and nothing stored).
    assert not build_trtllm_checkpoint(plan, tiny_llama3, tmp_path / "d").cached


@pytest.mark.slow  # tiny_llama3 is made with torch and transformers
def test_where_calibration_runs_is_in_the_key_but_not_the_gpu_count(tiny_llama3: Path) -> None:
    """A checkpoint calibrated on a CPU in float32 is not reused by a GPU host that would calibrate
    in bfloat16 (other scales); one GPU or eight give the same numbers."""
    from lmi_build.quantize.placement import choose_placement

    plan = make_build_plan(tiny_llama3, method="fp8", options=FAST_CALIB, dtype="bfloat16")
    on = {name: choose_placement("bfloat16", runs_forward=True, cuda_devices=gpus)
          for name, gpus in (("cpu", 0), ("1 gpu", 1), ("8 gpus", 8))}
    keys = {name: checkpoint_key(plan, tiny_llama3, "trtllm", _shaping(plan), calibrated_on=where)[0] for name, where in on.items()}
    assert keys["cpu"] != keys["1 gpu"] == keys["8 gpus"]
    assert checkpoint_key(plan, tiny_llama3, "trtllm", _shaping(plan))[0] not in keys.values()
