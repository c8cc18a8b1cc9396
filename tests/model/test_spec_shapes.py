"""Parameter estimates, rope/KV variants and error handling of config normalisation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import SourceError
from lmi_build.model.normalize import read_spec, read_spec_file
from tests.conftest import FIXTURE_CONFIGS


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE_CONFIGS / name / "config.json").read_text())
    return data


# Published parameter counts (model cards / papers).
PUBLISHED = [
    ("meta-llama--Llama-2-7b-hf", 6.74e9),
    ("mistralai--Mistral-7B-v0.1", 7.24e9),
    ("mistralai--Mixtral-8x7B-v0.1", 46.7e9),
    ("openai-community--gpt2", 124e6),
    ("tiiuae--falcon-7b", 6.92e9),
    ("EleutherAI--gpt-j-6b", 6.05e9),
    ("Qwen--Qwen-7B", 7.72e9),
    ("baichuan-inc--Baichuan2-13B-Chat", 13.9e9),
    ("THUDM--chatglm2-6b", 6.24e9),
    ("bigscience--bloom-560m", 559e6),
    ("microsoft--phi-2", 2.78e9),
    ("google--gemma-2b-it", 2.51e9),
    ("google--flan-t5-large", 783e6),
    ("replit--replit-code-v1_5-3b", 3.3e9),
    # model cards: "14.3B parameters in total and 2.7B activated"; "15.7B total parameters" (2.4B activated)
    ("Qwen--Qwen1.5-MoE-A2.7B-Chat", 14.3e9),
    ("deepseek-ai--DeepSeek-V2-Lite", 15.7e9),
]


@pytest.mark.parametrize(("name", "published"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameter_estimate_close_to_published(name: str, published: float) -> None:
    estimate = read_spec_file(FIXTURE_CONFIGS / name).num_parameters
    assert abs(estimate - published) / published < 0.02, f"{estimate:.4g} vs {published:.4g}"


# transformers implements these natively, so a model built on the meta device gives the exact count.
NATIVE = [
    "meta-llama--Llama-2-7b-hf", "mistralai--Mistral-7B-v0.1", "mistralai--Mixtral-8x7B-v0.1",
    "openai-community--gpt2", "EleutherAI--gpt-j-6b", "facebook--opt-125m", "bigscience--bloom-560m",
    "google--gemma-2b-it", "microsoft--phi-2", "google--flan-t5-large",
    "togethercomputer--RedPajama-INCITE-7B-Base", "codefuse-ai--CodeFuse-CodeLlama-34B",
    "Qwen--Qwen1.5-MoE-A2.7B-Chat", "deepseek-ai--DeepSeek-V2-Lite",
]


# The config keys of a layer count; the comparison runs at 4 layers at most (building 32-60 layers of
# 14 models on the meta device cost ~15 s of CPU): the first (dense) and later (MoE) layers of
# DeepSeek-V2 and Qwen-MoE are both among them.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "n_layers")
MAX_LAYERS = 4


def _fewer_layers(config: dict[str, Any]) -> dict[str, Any]:
    return {key: min(value, MAX_LAYERS) if key in LAYER_KEYS and isinstance(value, int) else value
            for key, value in config.items()}


@pytest.mark.slow
def test_parameter_estimate_matches_transformers_on_meta_device() -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    for name in NATIVE:
        raw = _fewer_layers(_fixture(name))
        assert raw != _fixture(name), f"{name}: no layer count to shrink"
        config = AutoConfig.for_model(**raw)
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        with torch.device("meta"):
            model = auto.from_config(config)
        actual = sum(p.numel() for p in model.parameters())
        estimate = read_spec(raw).num_parameters
        # Only biases are left out of the estimate.
        assert abs(estimate - actual) / actual < 0.002, f"{name}: {estimate} vs {actual}"


@pytest.mark.slow
def test_native_name_lists_match_installed_transformers() -> None:
    from lmi_build.model.native import collect_from_transformers, native_names

    assert native_names() == collect_from_transformers()


def test_llama3_rope_scaling_and_rope_type_key() -> None:
    config = _fixture("meta-llama--Llama-2-7b-hf") | {
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    }
    rope = read_spec(config).rope
    assert rope is not None
    assert (rope.theta, rope.scaling_type, rope.scaling_factor) == (500000.0, "llama3", 8.0)
    assert rope.original_max_position_embeddings == 8192
    assert rope.raw_scaling is not None and rope.raw_scaling["high_freq_factor"] == 4.0


def test_legacy_rope_scaling_type_key_and_transformers5_rope_parameters() -> None:
    legacy = _fixture("meta-llama--Llama-2-7b-hf") | {"rope_scaling": {"type": "linear", "factor": 2.0}}
    rope = read_spec(legacy).rope
    assert rope is not None and (rope.scaling_type, rope.scaling_factor) == ("linear", 2.0)

    v5 = {k: v for k, v in _fixture("mistralai--Mistral-7B-v0.1").items() if k not in ("rope_theta", "torch_dtype")}
    v5 |= {"dtype": "bfloat16", "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}
    spec = read_spec(v5)
    assert spec.rope is not None and (spec.rope.theta, spec.rope.scaling_type) == (1000000.0, None)
    assert spec.torch_dtype == "bfloat16"


@pytest.mark.parametrize(
    ("changes", "kv_heads"),
    [
        ({"multi_query": True}, 1),
        ({"new_decoder_architecture": True, "num_kv_heads": 8}, 8),
        ({"new_decoder_architecture": False, "num_kv_heads": 71}, 71),  # ignored without the new arch
    ],
)
def test_falcon_kv_head_variants(changes: dict[str, Any], kv_heads: int) -> None:
    base = {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": 4544,
            "num_hidden_layers": 32, "num_attention_heads": 71, "vocab_size": 65024}
    assert read_spec(base | changes).num_kv_heads == kv_heads


def test_mpt_multiquery_and_plain_attention() -> None:
    config = _fixture("replit--replit-code-v1_5-3b")
    mqa = config | {"attn_config": config["attn_config"] | {"attn_type": "multiquery_attention"}}
    mha = config | {"attn_config": config["attn_config"] | {"attn_type": "multihead_attention"}}
    assert read_spec(mqa).num_kv_heads == 1
    assert read_spec(mha).num_kv_heads == 24


def test_gpt_bigcode_multi_query() -> None:
    config = {"model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"], "n_embd": 6144,
              "n_layer": 40, "n_head": 48, "multi_query": True, "n_positions": 8192, "vocab_size": 49152}
    spec = read_spec(config)
    assert (spec.num_kv_heads, spec.max_position_embeddings, spec.position_embedding) == (1, 8192, "learned")
    assert abs(spec.num_parameters - 15.5e9) / 15.5e9 < 0.03  # StarCoder 15.5B


def test_dbrx_nested_moe_config() -> None:
    config = {"model_type": "dbrx", "architectures": ["DbrxForCausalLM"], "d_model": 6144, "n_heads": 48,
              "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
              "attn_config": {"kv_n_heads": 8, "rope_theta": 500000},
              "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
    spec = read_spec(config)
    assert (spec.num_kv_heads, spec.num_experts, spec.experts_per_token) == (8, 16, 4)
    assert spec.intermediate_size == 10752
    assert abs(spec.num_parameters - 132e9) / 132e9 < 0.02  # DBRX 132B


def test_read_spec_file_accepts_directory_or_file() -> None:
    directory = FIXTURE_CONFIGS / "openai-community--gpt2"
    assert read_spec_file(directory) == read_spec_file(directory / "config.json")


def test_missing_config_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"no model config at .*config\.json") as info:
        read_spec_file(tmp_path)
    assert info.value.hint and "config.json" in info.value.hint


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama",\n  "hidden_size": }')
    with pytest.raises(SourceError, match=r"not valid JSON \(line 2, column"):
        read_spec_file(tmp_path)


def test_non_object_json_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(SourceError, match="not a JSON object"):
        read_spec_file(tmp_path)


def test_missing_shape_names_the_keys_tried() -> None:
    with pytest.raises(SourceError, match=r"no valid hidden size \(looked for hidden_size, n_embd, n_embed, d_model\)"):
        read_spec({"model_type": "llama", "num_hidden_layers": 2})
    with pytest.raises(SourceError, match="neither model_type nor architectures"):
        read_spec({"hidden_size": 8})
