"""Which file names hold a tokenizer's vocabulary (issue 42 item 3): what the plan reads of a source it
has not downloaded."""

from __future__ import annotations

import pytest

from lmi_build.model.tokenizer import tokenizer_files


@pytest.mark.parametrize(("names", "found"), [
    (["config.json", "tokenizer.json", "tokenizer_config.json"], ["tokenizer.json"]),  # a fast tokenizer
    (["tokenizer.model", "tokenizer_config.json"], ["tokenizer.model"]),  # SentencePiece (Llama-2, Baichuan)
    (["spiece.model"], ["spiece.model"]),  # T5
    (["vocab.json", "merges.txt"], ["vocab.json"]),  # GPT-2 BPE
    (["vocab.txt"], ["vocab.txt"]),  # WordPiece
    (["qwen.tiktoken", "tokenization_qwen.py"], ["qwen.tiktoken"]),  # Qwen (v1)
    (["config.json", "tokenizer_config.json", "special_tokens_map.json"], []),  # no vocabulary
    (["original/tokenizer.model", "model.safetensors"], []),  # Meta's checkpoint dir is not carried
])
def test_tokenizer_files(names: list[str], found: list[str]) -> None:
    assert tokenizer_files(names) == found
