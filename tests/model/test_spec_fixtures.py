"""Every fixture config.json normalises to the shapes in its README row."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from lmi_build.model.normalize import read_spec_file
from lmi_build.model.spec import ModelSpec
from tests.conftest import FIXTURE_CONFIGS


@dataclass(frozen=True)
class Row:
    """One row of tests/fixtures/hf-configs/README.md, plus the notes column made checkable."""

    directory: str
    model_type: str
    architecture: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    max_pos: int | None
    max_pos_key: str | None
    vocab: int
    dtype: str | None
    position: str = "rope"
    remote_code: bool = False
    decoder_layers: int | None = None
    experts: tuple[int, int] | None = None
    head_dim: int | None = None


ROWS = [
    Row("baichuan-inc--Baichuan2-13B-Chat", "baichuan", "BaichuanForCausalLM", 5120, 40, 40, 40,
        4096, "model_max_length", 125696, "bfloat16", position="alibi", remote_code=True),
    Row("bigscience--bloom-560m", "bloom", "BloomForCausalLM", 1024, 24, 16, 16,
        None, None, 250880, None, position="alibi"),
    Row("codefuse-ai--CodeFuse-CodeLlama-34B", "llama", "LlamaForCausalLM", 8192, 48, 64, 8,
        16384, "max_position_embeddings", 32000, "bfloat16"),
    Row("EleutherAI--gpt-j-6b", "gptj", "GPTJForCausalLM", 4096, 28, 16, 16,
        2048, "n_positions", 50400, None),
    Row("facebook--opt-125m", "opt", "OPTForCausalLM", 768, 12, 12, 12,
        2048, "max_position_embeddings", 50272, "float16", position="learned"),
    Row("google--flan-t5-large", "t5", "T5ForConditionalGeneration", 1024, 24, 16, 16,
        512, "n_positions", 32128, None, position="relative", decoder_layers=24, head_dim=64),
    Row("google--gemma-2-9b", "gemma2", "Gemma2ForCausalLM", 3584, 42, 16, 8,
        8192, "max_position_embeddings", 256000, "float32", head_dim=256),
    Row("google--gemma-2b-it", "gemma", "GemmaForCausalLM", 2048, 18, 8, 1,
        8192, "max_position_embeddings", 256000, "bfloat16", head_dim=256),
    Row("huggyllama--llama-7b", "llama", "LlamaForCausalLM", 4096, 32, 32, 32,
        2048, "max_position_embeddings", 32000, "float16"),
    Row("lmsys--vicuna-7b-delta-v0", "llama", "LlamaForCausalLM", 4096, 32, 32, 32,
        2048, "max_position_embeddings", 32001, "float16"),
    Row("meta-llama--Llama-2-7b-hf", "llama", "LlamaForCausalLM", 4096, 32, 32, 32,
        4096, "max_position_embeddings", 32000, "float16"),
    Row("meta-llama--Llama-3.2-3B", "llama", "LlamaForCausalLM", 3072, 28, 24, 8,
        131072, "max_position_embeddings", 128256, "bfloat16"),
    Row("meta-llama--Llama-3.1-8B-Instruct", "llama", "LlamaForCausalLM", 4096, 32, 32, 8,
        131072, "max_position_embeddings", 128256, "bfloat16"),
    Row("microsoft--Orca-2-13b", "llama", "LlamaForCausalLM", 5120, 40, 40, 40,
        4096, "max_position_embeddings", 32003, "float32"),
    # phi-2 still carries an auto_map, but transformers has PhiForCausalLM: no remote code needed.
    Row("microsoft--phi-2", "phi", "PhiForCausalLM", 2560, 32, 32, 32,
        2048, "max_position_embeddings", 51200, "float16"),
    # Phi-3 still carries an auto_map, but transformers has Phi3ForCausalLM: no remote code needed.
    Row("microsoft--Phi-3-mini-4k-instruct", "phi3", "Phi3ForCausalLM", 3072, 32, 32, 32,
        4096, "max_position_embeddings", 32064, "bfloat16"),
    Row("mistralai--Mistral-7B-Instruct-v0.2", "mistral", "MistralForCausalLM", 4096, 32, 32, 8,
        32768, "max_position_embeddings", 32000, "bfloat16"),
    Row("mistralai--Mistral-7B-v0.1", "mistral", "MistralForCausalLM", 4096, 32, 32, 8,
        32768, "max_position_embeddings", 32000, "bfloat16"),
    Row("mistralai--Mixtral-8x7B-v0.1", "mixtral", "MixtralForCausalLM", 4096, 32, 32, 8,
        32768, "max_position_embeddings", 32000, "bfloat16", experts=(8, 2)),
    Row("openai-community--gpt2", "gpt2", "GPT2LMHeadModel", 768, 12, 12, 12,
        1024, "n_positions", 50257, None, position="learned"),
    Row("Qwen--Qwen2.5-7B-Instruct", "qwen2", "Qwen2ForCausalLM", 3584, 28, 28, 4,
        32768, "max_position_embeddings", 152064, "bfloat16"),
    # Qwen1.5-MoE: 60 routed experts, top 4 (plus a shared expert the spec does not model).
    Row("Qwen--Qwen1.5-MoE-A2.7B-Chat", "qwen2_moe", "Qwen2MoeForCausalLM", 2048, 24, 16, 16,
        32768, "max_position_embeddings", 151936, "bfloat16", experts=(60, 4)),
    # DeepSeek-V2-Lite carries an auto_map, but transformers has DeepseekV2ForCausalLM: no remote code needed.
    # 64 routed experts (n_routed_experts), top 6.
    Row("deepseek-ai--DeepSeek-V2-Lite", "deepseek_v2", "DeepseekV2ForCausalLM", 2048, 27, 16, 16,
        163840, "max_position_embeddings", 102400, "bfloat16", experts=(64, 6)),
    # Qwen: max_position_embeddings (32768) wins over seq_length (8192): dynamic NTK reaches 32k.
    Row("Qwen--Qwen-7B", "qwen", "QWenLMHeadModel", 4096, 32, 32, 32,
        32768, "max_position_embeddings", 151936, None, remote_code=True, head_dim=128),
    Row("replit--replit-code-v1_5-3b", "mpt", "MPTForCausalLM", 3072, 32, 24, 8,
        4096, "max_seq_len", 32768, "bfloat16", position="alibi", remote_code=True),
    Row("THUDM--chatglm2-6b", "chatglm", "ChatGLMModel", 4096, 28, 32, 2,
        32768, "seq_length", 65024, "float16", remote_code=True, head_dim=128),
    # The RW revisions state no length; FalconConfig's default (2048, the training length) applies.
    Row("tiiuae--falcon-40b", "RefinedWeb", "RWForCausalLM", 8192, 60, 128, 8,
        2048, "default", 65024, "bfloat16", remote_code=True),
    Row("tiiuae--falcon-7b", "RefinedWebModel", "RWForCausalLM", 4544, 32, 71, 1,
        2048, "default", 65024, "bfloat16", remote_code=True),
    Row("togethercomputer--RedPajama-INCITE-7B-Base", "gpt_neox", "GPTNeoXForCausalLM", 4096, 32, 32, 32,
        2048, "max_position_embeddings", 50432, "float16"),
]


@pytest.fixture(scope="module")
def specs() -> dict[str, ModelSpec]:
    return {row.directory: read_spec_file(FIXTURE_CONFIGS / row.directory) for row in ROWS}


def test_every_fixture_has_a_row() -> None:
    on_disk = {p.name for p in FIXTURE_CONFIGS.iterdir() if (p / "config.json").is_file()}
    assert on_disk == {row.directory for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=[row.directory for row in ROWS])
def test_fixture_normalises_to_readme_row(row: Row, specs: dict[str, ModelSpec]) -> None:
    spec = specs[row.directory]
    assert (spec.model_type, spec.architecture) == (row.model_type, row.architecture)
    assert spec.hidden_size == row.hidden
    assert spec.num_layers == row.layers
    assert spec.num_decoder_layers == row.decoder_layers
    assert spec.is_encoder_decoder is (row.decoder_layers is not None)
    assert spec.num_attention_heads == row.heads
    assert spec.num_kv_heads == row.kv_heads
    assert spec.head_dim == (row.head_dim or row.hidden // row.heads)
    assert (spec.max_position_embeddings, spec.max_position_source) == (row.max_pos, row.max_pos_key)
    assert spec.vocab_size == row.vocab
    assert spec.torch_dtype == row.dtype
    assert spec.position_embedding == row.position
    assert (spec.rope is not None) is (row.position == "rope")
    assert spec.requires_remote_code is row.remote_code
    assert (spec.num_experts, spec.experts_per_token) == (row.experts or (None, None))
    assert spec.pre_quantization is None
    assert spec.raw == json.loads((FIXTURE_CONFIGS / row.directory / "config.json").read_text())


def test_rope_details_from_the_notes_column(specs: dict[str, ModelSpec]) -> None:
    rope = {name: spec.rope for name, spec in specs.items()}
    assert rope["codefuse-ai--CodeFuse-CodeLlama-34B"].theta == 1_000_000.0  # type: ignore[union-attr]
    assert rope["mistralai--Mistral-7B-Instruct-v0.2"].theta == 1_000_000.0  # type: ignore[union-attr]
    assert rope["mistralai--Mistral-7B-v0.1"].theta == 10_000.0  # type: ignore[union-attr]
    assert rope["EleutherAI--gpt-j-6b"].rotary_dim == 64  # type: ignore[union-attr]
    assert rope["microsoft--phi-2"].rotary_dim == 32  # type: ignore[union-attr]  # 0.4 * 80
    assert rope["togethercomputer--RedPajama-INCITE-7B-Base"].rotary_dim == 128  # type: ignore[union-attr]
    assert rope["THUDM--chatglm2-6b"].rotary_dim == 64  # type: ignore[union-attr]  # half of head_dim
    assert rope["meta-llama--Llama-2-7b-hf"].scaling_type is None  # type: ignore[union-attr]
    llama31 = rope["meta-llama--Llama-3.1-8B-Instruct"]
    assert (llama31.scaling_type, llama31.scaling_factor, llama31.theta) == ("llama3", 8.0, 500_000.0)  # type: ignore[union-attr]
    assert rope["Qwen--Qwen2.5-7B-Instruct"].theta == 1_000_000.0  # type: ignore[union-attr]


def test_remote_code_comes_with_auto_map_or_unknown_class(specs: dict[str, ModelSpec]) -> None:
    for name, spec in specs.items():
        if spec.requires_remote_code:
            assert spec.auto_map, name


def test_tied_embeddings_follow_config_or_class_default(specs: dict[str, ModelSpec]) -> None:
    tied = {name for name, spec in specs.items() if spec.tie_word_embeddings}
    assert tied == {
        "bigscience--bloom-560m", "facebook--opt-125m", "google--gemma-2-9b", "google--gemma-2b-it", "openai-community--gpt2",
        "replit--replit-code-v1_5-3b", "tiiuae--falcon-40b", "tiiuae--falcon-7b", "meta-llama--Llama-3.2-3B",
    }
