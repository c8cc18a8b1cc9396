"""Issue 42 item 2: one host-RAM figure per convert/quantize step (the step's own estimate, the same in
the memory estimate), and a step whose peak is more than this host has is said, naming this host's RAM
and where the plan can run instead (the plan stays valid: a saved plan builds on another host)."""

from __future__ import annotations

from typing import Any

import pytest

from lmi_build.planning import checkpoint_estimate
from lmi_build.planning.instances import GIB
from lmi_build.planning.memory import host_ram_bytes
from tests.fixtures_planning import ModelDirFactory, Planner, warning_codes

LLAMA = "meta-llama--Llama-3.1-8B-Instruct"
# Llama-3.1-70B's shape on the 8B fixture (meta-llama/Llama-3.1-70B config.json: hidden 8192, 80 layers,
# 64 heads, 8 KV heads, MLP 28672)
LLAMA_70B: dict[str, Any] = {"hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
                             "intermediate_size": 28672}


def test_the_memory_estimate_carries_the_steps_own_peak(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    streamed = plan_model("trtllm", model_dir(LLAMA, **LLAMA_70B), tp="8", max_output_len=1024)
    assert streamed.checkpoint_step is not None and streamed.memory is not None
    # the streamed writer holds a few tensors (the embedding, twice: 4.4 GiB), not the general bound's two fp16
    # copies of 70B parameters and 2 GiB (265 GiB), which the plan printed beside it before
    general = host_ram_bytes(streamed.spec, "float16", streamed.memory.weight_bytes, False)
    assert general > 200 * GIB
    assert streamed.memory.host_ram_bytes == streamed.checkpoint_step.host_ram_bytes < 8 * GIB
    # No step on this host (the vendor route converts in the container): the general bound stays
    vendor = plan_model("trtllm", "google--gemma-2-9b", tp="1", max_output_len=1024)
    assert vendor.checkpoint_step is None and vendor.memory is not None
    assert vendor.memory.host_ram_bytes is not None and vendor.memory.host_ram_bytes > 2 * vendor.memory.weight_bytes


def test_a_peak_over_this_hosts_ram_is_said(plan_model: Planner, model_dir: ModelDirFactory,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_estimate, "host_memory_bytes", lambda: 23 * GIB)
    plan = plan_model("trtllm", model_dir(LLAMA, **LLAMA_70B), tp="8", quantize="awq", max_output_len=1024)
    step = plan.checkpoint_step
    assert step is not None and step.host_ram_bytes > 100 * GIB
    assert plan.valid, plan.errors  # a saved plan builds on a host that has the RAM
    warning = next(w for w in plan.warnings if w.code == "host_ram")
    assert f"needs about {step.host_ram_bytes / GIB:.1f} GiB of host RAM" in warning.message
    assert "this host has 23.0 GiB" in warning.message and "\n" not in warning.message
    assert warning.hint is not None and "--plan plan.json" in warning.hint
    if step.device == "cpu":  # the CPU estimate loads float32 for calibration; a GPU host loads float16
        assert "a GPU host, where the weights load in float16" in warning.hint
    roomy = 4096 * GIB
    monkeypatch.setattr(checkpoint_estimate, "host_memory_bytes", lambda: roomy)
    again = plan_model("trtllm", model_dir(LLAMA, **LLAMA_70B), tp="8", quantize="awq", max_output_len=1024)
    assert "host_ram" not in warning_codes(again)
