"""Pre-quantized checkpoints are recognised from quantization_config and sibling files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmi_build.model.normalize import read_spec, read_spec_file
from tests.conftest import FIXTURE_CONFIGS

LLAMA = json.loads((FIXTURE_CONFIGS / "meta-llama--Llama-2-7b-hf" / "config.json").read_text())

# As written by AutoAWQ, AutoGPTQ, transformers' FineGrainedFP8, bitsandbytes, llm-compressor, ModelOpt.
AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
       "version": "gemm", "zero_point": True}
GPTQ = {"bits": 4, "damp_percent": 0.1, "desc_act": True, "group_size": 128, "is_marlin_format": False,
        "model_file_base_name": "model", "model_name_or_path": None, "quant_method": "gptq",
        "static_groups": False, "sym": True, "true_sequential": True}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
       "bnb_4bit_quant_type": "nf4"}
COMPRESSED = {"quant_method": "compressed-tensors", "format": "pack-quantized",
              "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                  "num_bits": 4, "group_size": 128, "strategy": "group", "symmetric": True, "type": "int"}}}}
MODELOPT = {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ", "group_size": 128}


@pytest.mark.parametrize(
    ("qcfg", "expected"),
    [
        (AWQ, {"method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}),
        (GPTQ, {"method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}),
        (FP8, {"method": "fp8", "bits": 8, "group_size": None}),
        (BNB, {"method": "bitsandbytes", "bits": 4}),
        (COMPRESSED, {"method": "compressed-tensors", "bits": 4, "group_size": 128, "version": "pack-quantized"}),
        (MODELOPT, {"method": "modelopt", "quant_algo": "W4A16_AWQ", "group_size": 128}),
    ],
    ids=["awq", "gptq", "fp8", "bitsandbytes", "compressed-tensors", "modelopt"],
)
def test_quantization_config_is_recognised(qcfg: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = read_spec(LLAMA | {"quantization_config": qcfg})
    assert spec.pre_quantization is not None
    for field, value in expected.items():
        assert getattr(spec.pre_quantization, field) == value, field
    assert spec.pre_quantization.raw == qcfg
    # The shapes are the model's, whatever the storage format.
    assert spec.num_parameters == read_spec(LLAMA).num_parameters


def test_gptq_without_act_order() -> None:
    spec = read_spec(LLAMA | {"quantization_config": GPTQ | {"desc_act": False}})
    assert spec.pre_quantization is not None and spec.pre_quantization.desc_act is False


def test_modelopt_hf_quant_config_beside_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.47.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
    }))
    pre = read_spec_file(tmp_path).pre_quantization
    assert pre is not None and (pre.method, pre.quant_algo) == ("modelopt", "FP8")


def test_legacy_autoawq_quant_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "quant_config.json").write_text(
        json.dumps({"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}))
    pre = read_spec_file(tmp_path).pre_quantization
    assert pre is not None
    assert (pre.method, pre.bits, pre.group_size, pre.zero_point, pre.version) == ("awq", 4, 128, True, "gemm")


def test_config_quantization_wins_over_sibling_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA | {"quantization_config": GPTQ}))
    (tmp_path / "quant_config.json").write_text(json.dumps({"w_bit": 4, "q_group_size": 64}))
    pre = read_spec_file(tmp_path).pre_quantization
    assert pre is not None and pre.method == "gptq"


def test_unquantized_directory_has_no_pre_quantization(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert read_spec_file(tmp_path).pre_quantization is None
