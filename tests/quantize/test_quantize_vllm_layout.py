"""The packed hf formats (AutoAWQ, GPTQ v1) against vLLM: the facts in serving_formats.toml, and,
where vLLM is importable, vLLM's own packing code (utils/quant_utils.py awq_pack/gptq_pack/pack_cols),
which defines the layouts its awq/gptq loaders read. vLLM is not a dependency (no CPU wheel for
this host; its CUDA wheel installs with --no-deps but its serving stack does not import): to include
that part, run this file with a Python that has ``pip install --no-deps vllm==X`` on top of the
project's packages (measured: 0.11.1 and 0.17.0, see the issue-15 note)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from lmi_build.quantize import awq_format, compressed_tensors_format, gptq_format, int4_pack
from lmi_build.targets.hf.profiles import format_facts, load_profiles, serving_formats

GROUP = 128


def _weight_and_amax(out_features: int = 64, in_features: int = 256) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(out_features, in_features, generator=generator)
    amax = weight.reshape(out_features, in_features // GROUP, GROUP).abs().amax(-1).reshape(-1, 1)
    return weight, amax


def _vllm_quant_utils() -> Any:
    """vLLM's quant_utils module, loaded by path: vllm.model_executor's package import pulls in
    the serving stack (zmq, ...), the file itself needs only torch, numpy and vllm.platforms."""
    pytest.importorskip("vllm.scalar_type", reason="vLLM is not installed here (no CPU wheel for this host)")
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "model_executor/layers/quantization/utils/quant_utils.py"
    module_spec = importlib.util.spec_from_file_location("vllm_quant_utils", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # the writers pack with torch
def test_writers_write_the_configs_the_data_file_states() -> None:
    assert awq_format.quantization_config(GROUP) == format_facts("awq").config
    assert gptq_format.quantization_config(GROUP) == format_facts("gptq").config
    assert compressed_tensors_format.quantization_config() == format_facts("compressed_tensors").config


def test_every_format_fact_and_profile_has_a_source() -> None:
    formats = serving_formats()
    assert {f.name for f in formats.format} == {"awq", "gptq", "modelopt_hf", "compressed_tensors"}
    for fact in formats.format:
        assert fact.sources and all(s.split()[0].startswith("v0.") or "/" in s for s in fact.sources), fact.name
    assert formats.serving.sources
    for profile in load_profiles():
        assert profile.sources, profile.name
        assert set(profile.formats) == {"awq", "gptq", "fp8", "smoothquant", "int8_wo", "int4_wo"}, profile.name
        if profile.vllm_memory.check == "warmup":
            # LMI-Dist 8 (not built on vLLM) is told the method only by option.quantize, which lmi-build withholds
            assert profile.formats["awq"] == profile.formats["gptq"] == "", profile.name
            assert any("option.quantize" in i for i in profile.inferred), profile.name
            continue
        # Every vLLM release in the profiles loads both packed formats (the data says where).
        assert profile.formats["awq"] == "awq" and profile.formats["gptq"] == "gptq", profile.name


@pytest.mark.slow  # the writers pack with torch
def test_awq_packing_is_vllms() -> None:
    import torch

    vllm = _vllm_quant_utils()
    weight, amax = _weight_and_amax()
    ints, _ = int4_pack.integers(weight, amax, GROUP)
    unsigned = (ints + 8).t().contiguous().to(torch.int32)  # [K = in, N = out]
    ours = awq_format.pack_linear(weight, amax, GROUP, torch.float16)
    k, n = unsigned.shape
    assert torch.equal(ours["qweight"], vllm.awq_pack(unsigned, 4, k, n))
    zeros = torch.full((k // GROUP, n), 8, dtype=torch.int32)
    assert torch.equal(ours["qzeros"], vllm.awq_pack(zeros, 4, k // GROUP, n))
    # And vLLM's unpacking (awq_to_marlin_zero_points' first step) gives the values back.
    undo = torch.argsort(torch.tensor(awq_format.AWQ_ORDER))
    back = vllm.unpack_cols(ours["qweight"], 4, k, n).reshape(-1, 8)[:, undo].reshape(k, n)
    assert torch.equal(back, unsigned)


@pytest.mark.slow  # the writers pack with torch
def test_gptq_packing_is_vllms() -> None:
    import torch

    vllm = _vllm_quant_utils()
    weight, amax = _weight_and_amax()
    ints, _ = int4_pack.integers(weight, amax, GROUP)
    unsigned = (ints + 8).t().contiguous().to(torch.int32)
    ours = gptq_format.pack_linear(weight, amax, GROUP, torch.float16)
    k, n = unsigned.shape
    assert torch.equal(ours["qweight"], vllm.gptq_pack(unsigned, 4, k, n))
    zeros_minus_one = torch.full((k // GROUP, n), 7, dtype=torch.int32)  # v1: stored minus one
    assert torch.equal(ours["qzeros"], vllm.pack_cols(zeros_minus_one, 4, k // GROUP, n))
    assert torch.equal(ours["g_idx"], torch.arange(k, dtype=torch.int32) // GROUP)
