"""Built-in demo models: deterministic, loadable, and planable without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmi_build.core.errors import SourceError
from lmi_build.sources.demo import DEMO_MODELS, ensure_demo_model
from lmi_build.sources.resolve import resolve_source
from tests.fixtures_s3 import tree_bytes


def test_plan_purpose_writes_config_without_importing_torch(tmp_path: Path) -> None:
    code = (
        "import sys, json\n"
        "from lmi_build.sources.resolve import resolve_source\n"
        "s = resolve_source('demo:tiny-llama3', purpose='plan')\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'\n"
        "print(json.dumps({'path': str(s.path), 'identity': s.identity.model_dump()}))\n"
    )
    env = {**os.environ, "LMI_BUILD_CACHE": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    import json

    data = json.loads(result.stdout)
    files = sorted(p.name for p in Path(data["path"]).iterdir())
    assert files == ["config.json", "generation_config.json"]
    config = json.loads((Path(data["path"]) / "config.json").read_text())
    assert config["rope_theta"] == 500000.0 and config["rope_scaling"]["rope_type"] == "llama3"
    assert data["identity"]["kind"] == "demo" and data["identity"]["digest"].startswith("sha256:")


def test_unknown_demo_model_lists_the_choices() -> None:
    with pytest.raises(SourceError, match="unknown demo model") as caught:
        resolve_source("demo:nope", purpose="plan")
    assert all(f"demo:{name}" in caught.value.one_line() for name in DEMO_MODELS)


@pytest.mark.slow
def test_generation_is_deterministic_across_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trees = []
    for name in ("a", "b"):
        monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / name))
        trees.append(tree_bytes(ensure_demo_model("tiny-mistral", with_weights=True)))
    assert trees[0] == trees[1]
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
            "generation_config.json", "config.json"} <= set(trees[0])


@pytest.mark.slow
def test_plan_and_build_agree_and_config_is_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path / "c"))
    planned = resolve_source("demo:tiny-gpt2", purpose="plan")
    config_for_plan = (planned.path / "config.json").read_bytes()
    built = resolve_source("demo:tiny-gpt2", purpose="build")
    assert built.identity == planned.identity
    assert (built.path / "config.json").read_bytes() == config_for_plan
    # Once the full model exists, a plan uses it too.
    assert resolve_source("demo:tiny-gpt2", purpose="plan").path == built.path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DEMO_MODELS))
def test_demo_models_load_and_tokenize(name: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = ensure_demo_model(name, with_weights=True)
    assert (path / "model.safetensors").stat().st_size < 10 * 1024 * 1024
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = "Hello, world! The quick brown fox jumps over 42 lazy dogs."
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    config = AutoConfig.from_pretrained(path)
    assert len(tokenizer) <= config.vocab_size
    if name != "tiny-gpt2":
        assert ids[0] == config.bos_token_id
        chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                             add_generation_prompt=True)
        assert "hi" in chat
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float16)
    assert next(model.parameters()).dtype == torch.float16
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), config.vocab_size)
    assert torch.isfinite(logits).all()
    if name == "tiny-mistral":
        assert config.num_key_value_heads == 2 and config.num_attention_heads == 8
