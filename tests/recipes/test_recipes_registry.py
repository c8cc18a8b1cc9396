"""Recipes load, match every fixture, carry the seed tables' facts, and infer version options."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import UnknownName, UnsupportedTarget
from lmi_build.model.normalize import read_spec, read_spec_file
from lmi_build.recipes.registry import RecipeBook, RecipeError, load_recipes, recipes_dir
from lmi_build.recipes.schema import Recipe
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT


@pytest.fixture(scope="module")
def book() -> RecipeBook:
    return load_recipes()


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURE_CONFIGS / name / "config.json").read_text())
    return data


def _with(book: RecipeBook, target: str, attribute: str, value: str) -> set[str]:
    return {r.name for r in book if target in r.targets and value in getattr(r.targets[target], attribute)}


def test_checkout_recipes_are_used(book: RecipeBook) -> None:
    assert recipes_dir() == REPO_ROOT / "recipes"
    files = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.toml"))
    assert book.names() == files
    assert load_recipes() is book  # cached


def test_required_families_present(book: RecipeBook) -> None:
    required = {"llama", "mistral", "mixtral", "falcon", "gptj", "gpt2", "gpt_neox", "baichuan", "chatglm",
                "qwen", "phi", "gemma", "bloom", "opt", "mpt", "t5"}
    assert required <= set(book.names())
    assert all(r.version >= 1 for r in book)


FIXTURE_RECIPES = {
    "baichuan-inc--Baichuan2-13B-Chat": "baichuan", "bigscience--bloom-560m": "bloom",
    "codefuse-ai--CodeFuse-CodeLlama-34B": "llama", "EleutherAI--gpt-j-6b": "gptj", "facebook--opt-125m": "opt",
    "google--flan-t5-large": "t5", "google--gemma-2b-it": "gemma", "google--gemma-2-9b": "gemma2",
    "Qwen--Qwen2.5-7B-Instruct": "qwen2", "meta-llama--Llama-3.1-8B-Instruct": "llama",
    "meta-llama--Llama-3.2-3B-Instruct": "llama",
    "microsoft--Phi-3-mini-4k-instruct": "phi3", "huggyllama--llama-7b": "llama",
    "lmsys--vicuna-7b-delta-v0": "llama", "meta-llama--Llama-2-7b-hf": "llama", "microsoft--Orca-2-13b": "llama",
    "microsoft--phi-2": "phi", "mistralai--Mistral-7B-Instruct-v0.2": "mistral",
    "mistralai--Mistral-7B-v0.1": "mistral", "mistralai--Mixtral-8x7B-v0.1": "mixtral",
    "openai-community--gpt2": "gpt2", "Qwen--Qwen-7B": "qwen", "replit--replit-code-v1_5-3b": "mpt",
    "THUDM--chatglm2-6b": "chatglm", "tiiuae--falcon-40b": "falcon", "tiiuae--falcon-7b": "falcon",
    "togethercomputer--RedPajama-INCITE-7B-Base": "gpt_neox",
    "Qwen--Qwen1.5-MoE-A2.7B-Chat": "qwen2_moe", "deepseek-ai--DeepSeek-V2-Lite": "deepseek_v2",
}


def test_every_fixture_is_listed() -> None:
    assert set(FIXTURE_RECIPES) == {p.name for p in FIXTURE_CONFIGS.iterdir() if p.is_dir()}


@pytest.mark.parametrize(("fixture", "recipe"), sorted(FIXTURE_RECIPES.items()))
def test_every_fixture_matches_its_recipe(book: RecipeBook, fixture: str, recipe: str) -> None:
    assert book.match(read_spec_file(FIXTURE_CONFIGS / fixture)).name == recipe


def test_architecture_wins_over_model_type(book: RecipeBook) -> None:
    config = _config("mistralai--Mistral-7B-v0.1") | {"model_type": "llama"}
    assert book.match(read_spec(config)).name == "mistral"
    config["architectures"] = ["SomethingNewForCausalLM"]
    assert book.match(read_spec(config)).name == "llama"


def test_no_match_lists_supported_families(book: RecipeBook) -> None:
    config = _config("meta-llama--Llama-2-7b-hf") | {"model_type": "rwkv", "architectures": ["RwkvForCausalLM"]}
    with pytest.raises(UnsupportedTarget, match="no recipe for model_type 'rwkv'") as info:
        book.match(read_spec(config))
    assert info.value.hint and "llama" in info.value.hint and "chatglm" in info.value.hint
    assert "lmi-build recipes list" in info.value.hint


def test_get_unknown_name_lists_recipes(book: RecipeBook) -> None:
    assert book.get("llama").name == "llama"
    with pytest.raises(UnknownName, match="no recipe named 'lama'") as info:
        book.get("lama")
    assert info.value.hint and "llama" in info.value.hint


# --- facts of the seed tables (000 TensorRT-LLM / Transformers-NeuronX, 004 JIT list) -----------------


def test_trtllm_quantization_matches_seed_tables(book: RecipeBook) -> None:
    assert _with(book, "trtllm", "quantize", "smoothquant") == {"llama", "mistral", "internlm", "baichuan"}
    assert _with(book, "trtllm", "quantize", "awq") == {"llama", "mistral"}
    assert _with(book, "trtllm", "quantize", "fp8") == {"llama", "mistral", "mixtral", "baichuan", "gemma", "gpt2"}


def test_trtllm_targets_cover_seed_004_jit_list(book: RecipeBook) -> None:
    jit = {"llama", "falcon", "internlm", "baichuan", "chatglm", "gptj", "mistral", "mixtral", "qwen", "gpt2"}
    trtllm = {r.name for r in book if r.supports("trtllm")}
    assert jit <= trtllm
    # later LMI / TensorRT-LLM >= 0.8 (qwen2, phi3 >= 0.10, qwen2_moe >= 0.11, gemma2 >= 0.13,
    # deepseek_v2 >= 0.15: since.toml), each with a note
    assert trtllm - jit == {"gemma", "phi", "qwen2", "t5", "phi3", "gemma2", "qwen2_moe", "deepseek_v2"}
    for name in trtllm - jit:
        assert book.get(name).targets["trtllm"].notes


def test_neuronx_targets_and_int8(book: RecipeBook) -> None:
    assert {r.name for r in book if r.supports("neuronx")} == {
        "llama", "mistral", "mixtral", "gpt2", "gptj", "gpt_neox", "opt", "bloom"}
    assert _with(book, "neuronx", "quantize", "int8") == {"llama", "mistral", "gpt2"}
    assert _with(book, "neuronx", "options_allowed", "group_query_attention") == {"llama", "mistral"}


def test_restricted_options_match_seed_table(book: RecipeBook) -> None:
    assert _with(book, "trtllm", "options_allowed", "use_fused_mlp") == {"llama"}
    assert _with(book, "trtllm", "options_allowed", "rotary_dim") == {"gptj"}
    for option in ("rotary_base", "rotary_scaling_type", "rotary_scaling_factor"):
        assert _with(book, "trtllm", "options_allowed", option) == {"llama", "internlm", "qwen"}
    assert _with(book, "trtllm", "options_refused", "multi_block_mode") == {"qwen"}
    for name in ("baichuan", "chatglm", "gpt2"):
        option = f"{name.replace('gpt2', 'gpt')}_model_version"
        assert _with(book, "trtllm", "options_allowed", option) == {name}


def test_hf_target_covers_seed_003_list(book: RecipeBook) -> None:
    seed_003 = {"aquila", "baichuan", "bloom", "chatglm", "dbrx", "deci", "falcon", "gemma", "gpt2", "gptj",
                "gpt_neox", "internlm", "llama", "mistral", "mixtral", "mpt", "opt", "phi", "qwen", "qwen2",
                "yi", "t5"}
    # beyond seed 003: families of today (issue 22), which vLLM loads and TensorRT-LLM builds from some
    # release on with its own converter (ModelOpt 0.47 exports none of them: no modelopt_decoder)
    today = {"phi3", "gemma2", "qwen2_moe", "deepseek_v2"}
    assert {r.name for r in book if r.supports("hf")} == seed_003 | today
    for name in today:
        support = book.get(name).targets["trtllm"]
        assert support.modelopt_decoder is None and support.trtllm_example, name


def test_modelopt_decoders(book: RecipeBook) -> None:
    decoders = {r.name: r.targets["trtllm"].modelopt_decoder for r in book if r.supports("trtllm")}
    assert decoders["gpt2"] is None  # ModelOpt's GPT-2 TRT-LLM export raises NotImplementedError
    assert decoders["mistral"] == decoders["mixtral"] == decoders["llama"] == "llama"
    # ModelOpt refuses the TensorRT-LLM export of falcon and chatglm (nvidia-modelopt 0.47.0
    # torch/export/tensorrt_llm_utils.py:343-347): their checkpoints come from the vendor converters.
    assert decoders["falcon"] is None and decoders["chatglm"] is None and decoders["t5"] == "t5"


def test_t5_default_scheduler_policy(book: RecipeBook) -> None:
    assert book.get("t5").targets["trtllm"].defaults == {"batch_scheduler_policy": "guaranteed_no_evict"}


# --- version options ---------------------------------------------------------------------------------


def _infer(book: RecipeBook, config: dict[str, Any], target: str = "trtllm",
           given: dict[str, str] | None = None) -> tuple[dict[str, str], list[Any]]:
    from lmi_build.recipes.registry import infer_version_options

    spec = read_spec(config)
    return infer_version_options(book.match(spec), spec, target, given or {})


def test_baichuan2_13b_fixture_infers_v2_13b(book: RecipeBook) -> None:
    assert _infer(book, _config("baichuan-inc--Baichuan2-13B-Chat")) == ({"baichuan_model_version": "v2_13b"}, [])


@pytest.mark.parametrize(
    ("hidden", "vocab", "version"),
    [(4096, 64000, "v1_7b"), (5120, 64000, "v1_13b"), (4096, 125696, "v2_7b"), (5120, 125696, "v2_13b")],
)
def test_baichuan_versions_from_shapes(book: RecipeBook, hidden: int, vocab: int, version: str) -> None:
    config = _config("baichuan-inc--Baichuan2-13B-Chat") | {"hidden_size": hidden, "vocab_size": vocab}
    assert _infer(book, config)[0] == {"baichuan_model_version": version}


def test_baichuan_unknown_shape_requires_the_option(book: RecipeBook) -> None:
    config = _config("baichuan-inc--Baichuan2-13B-Chat") | {"hidden_size": 6144}
    values, messages = _infer(book, config)
    assert values == {}
    [message] = messages
    assert message.code == "model_version_required"
    assert "v1_7b, v1_13b, v2_7b, v2_13b" in message.message
    assert message.hint and "--option baichuan_model_version=" in message.hint


def test_chatglm2_fixture_infers_chatglm2_6b(book: RecipeBook) -> None:
    assert _infer(book, _config("THUDM--chatglm2-6b")) == ({"chatglm_model_version": "chatglm2_6b"}, [])


@pytest.mark.parametrize(
    ("changes", "version"),
    [
        ({"_name_or_path": "THUDM/chatglm3-6b"}, "chatglm3_6b"),
        ({"_name_or_path": "/models/ChatGLM3_6B_Base"}, "chatglm3_6b_base"),
        ({"_name_or_path": "THUDM/chatglm2-6b-32k", "rope_ratio": 16}, "chatglm2_6b_32k"),
        ({"_name_or_path": "my-finetune", "rope_ratio": 50}, "chatglm3_6b_32k"),
        ({"_name_or_path": "my-finetune", "seq_length": 8192}, "chatglm3_6b"),
        ({"_name_or_path": "x", "architectures": ["GLMModel"]}, "glm_10b"),
    ],
)
def test_chatglm_versions(book: RecipeBook, changes: dict[str, Any], version: str) -> None:
    assert _infer(book, _config("THUDM--chatglm2-6b") | changes)[0] == {"chatglm_model_version": version}


def test_chatglm_without_telling_name_or_shape_is_a_plan_error(book: RecipeBook) -> None:
    # chatglm2-6b and chatglm3-6b-base share every shape; only the name tells them apart.
    values, messages = _infer(book, _config("THUDM--chatglm2-6b") | {"_name_or_path": "/mnt/ckpt"})
    assert values == {}
    assert [m.code for m in messages] == ["model_version_required"]
    assert messages[0].hint and "--option chatglm_model_version=" in messages[0].hint


def test_user_value_wins_and_mismatch_warns(book: RecipeBook) -> None:
    config = _config("baichuan-inc--Baichuan2-13B-Chat")
    values, messages = _infer(book, config, given={"option.baichuan_model_version": "v1_13b"})
    assert values == {"baichuan_model_version": "v1_13b"}
    assert [m.code for m in messages] == ["model_version_mismatch"]
    values, messages = _infer(book, config, given={"baichuan_model_version": "v2_13b"})
    assert (values, messages) == ({"baichuan_model_version": "v2_13b"}, [])


def test_user_value_outside_choices_is_an_error(book: RecipeBook) -> None:
    values, messages = _infer(book, _config("THUDM--chatglm2-6b"), given={"chatglm_model_version": "glm4"})
    assert values == {}
    assert [m.code for m in messages] == ["model_version_invalid"]
    assert "chatglm2_6b_32k" in messages[0].message


def test_gpt_model_version_inferred_or_defaulted(book: RecipeBook) -> None:
    assert _infer(book, _config("openai-community--gpt2"))[0] == {"gpt_model_version": "gpt2"}
    starcoder = {"model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"], "n_embd": 6144,
                 "n_layer": 40, "n_head": 48, "multi_query": True, "n_positions": 8192, "vocab_size": 49152}
    assert _infer(book, starcoder)[0] == {"gpt_model_version": "starcoder"}
    santacoder = starcoder | {"n_embd": 2048, "n_layer": 24, "n_head": 16}
    assert _infer(book, santacoder)[0] == {"gpt_model_version": "santacoder"}


def test_version_options_only_apply_to_their_targets(book: RecipeBook) -> None:
    assert _infer(book, _config("baichuan-inc--Baichuan2-13B-Chat"), target="hf") == ({}, [])


# --- load errors -------------------------------------------------------------------------------------


def _copy_recipes(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "recipes"
    directory.mkdir()
    for name in names:
        shutil.copy(REPO_ROOT / "recipes" / f"{name}.toml", directory)
    return directory


def test_malformed_recipe_names_file_and_field(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path, "llama")
    (directory / "broken.toml").write_text('name = "broken"\nversion = 1\n[targets.trtllm]\nquantize = "awq"\n')
    with pytest.raises(RecipeError, match=r"broken\.toml: field targets\.trtllm\.quantize"):
        load_recipes(directory)


def test_unknown_target_and_extra_field_are_rejected(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path)
    (directory / "x.toml").write_text('name = "x"\nversion = 1\n[targets.tpu]\n')
    with pytest.raises(RecipeError, match=r"x\.toml: field targets\.tpu"):
        load_recipes(directory)
    (directory / "x.toml").write_text('name = "x"\nversion = 1\nmodel_type = ["x"]\n')
    with pytest.raises(RecipeError, match=r"x\.toml: field model_type: Extra inputs"):
        load_recipes(directory)


def test_unknown_quantization_method_is_rejected(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path)
    (directory / "x.toml").write_text('name = "x"\nversion = 1\n[targets.trtllm]\nquantize = ["smoothquant", "sq"]\n')
    with pytest.raises(RecipeError, match=r"x\.toml: field targets\.trtllm\.quantize: unknown method\(s\) sq"):
        load_recipes(directory)


def test_infer_value_outside_choices_is_rejected(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path)
    (directory / "x.toml").write_text(
        'name = "x"\nversion = 1\n[[version_options]]\nkey = "option.x_version"\ntargets = ["trtllm"]\nchoices = ["a"]\n'
        '[[version_options.infer]]\nwhen = { hidden_size = 1 }\nvalue = "b"\n')
    with pytest.raises(RecipeError, match=r"x\.toml: field version_options\.0.*'b'.*not among the choices"):
        load_recipes(directory)


def test_duplicate_claims_are_a_load_error(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path, "llama", "mistral")
    text = (directory / "mistral.toml").read_text().replace('model_types = ["mistral"]', 'model_types = ["llama"]')
    (directory / "mistral.toml").write_text(text)
    with pytest.raises(RecipeError, match="recipes 'llama' and 'mistral' both claim model_type 'llama'"):
        load_recipes(directory)


def test_name_must_match_file_and_toml_must_parse(tmp_path: Path) -> None:
    directory = _copy_recipes(tmp_path)
    (directory / "a.toml").write_text('name = "b"\nversion = 1\n')
    with pytest.raises(RecipeError, match=r"a\.toml: name 'b' differs from the file name"):
        load_recipes(directory)
    (directory / "a.toml").write_text('name = "a"\nversion = \n')
    with pytest.raises(RecipeError, match=r"a\.toml: invalid TOML"):
        load_recipes(directory)


def test_missing_or_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipes(tmp_path / "nowhere")
    with pytest.raises(RecipeError, match="no recipe files"):
        load_recipes(_copy_recipes(tmp_path))


def test_recipe_model_round_trips(book: RecipeBook) -> None:
    for recipe in book:
        assert Recipe.model_validate(recipe.model_dump()) == recipe
