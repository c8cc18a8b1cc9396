"""Unquantized dtype conversion, tensor by tensor: the same tensors as a cast, loadable by transformers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmi_build.quantize.convert import convert_checkpoint

pytestmark = pytest.mark.slow  # tiny_llama3 is made with torch and transformers, and the checks load it


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_tensor_is_the_cast_of_the_input(tiny_llama3: Path, tmp_path: Path, dtype: str) -> None:
    import torch
    from safetensors.torch import load_file

    written = convert_checkpoint(tiny_llama3, tmp_path, dtype)
    source = load_file(str(tiny_llama3 / "model.safetensors"))
    converted = load_file(str(tmp_path / "model.safetensors"))
    assert list(converted) == list(source) or sorted(converted) == sorted(source)
    for name, tensor in source.items():
        assert converted[name].dtype == getattr(torch, dtype), name
        assert torch.equal(converted[name], tensor.to(getattr(torch, dtype))), name
    assert written == (tmp_path / "model.safetensors").stat().st_size - 8 - int.from_bytes(
        (tmp_path / "model.safetensors").read_bytes()[:8], "little")
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == dtype


def test_sharded_input_keeps_its_shards_and_loads_in_transformers(tiny_llama3: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(str(tiny_llama3), dtype=torch.float16).save_pretrained(
        str(sharded), safe_serialization=True, max_shard_size="1MB")
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 1
    out = tmp_path / "out"
    out.mkdir()
    total = convert_checkpoint(sharded, out, "bfloat16")
    assert sorted(p.name for p in out.glob("*.safetensors")) == shards
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == total
    assert index["weight_map"] == json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]

    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype="auto")  # the dtype config.json names
    assert loaded.dtype == torch.bfloat16
    expected = AutoModelForCausalLM.from_pretrained(str(sharded), dtype=torch.bfloat16)
    ids = torch.arange(1, 17).unsqueeze(0)
    with torch.inference_mode():
        assert torch.equal(loaded(input_ids=ids).logits, expected(input_ids=ids).logits)


def test_tensors_larger_than_a_chunk_are_cast_piece_by_piece(tiny_llama3: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file

    from lmi_build.quantize import convert

    monkeypatch.setattr(convert, "CHUNK_BYTES", 1003)  # odd on purpose: chunks end on an element boundary
    convert_checkpoint(tiny_llama3, tmp_path, "bfloat16")
    source = load_file(str(tiny_llama3 / "model.safetensors"))
    converted = load_file(str(tmp_path / "model.safetensors"))
    assert max(t.numel() * t.element_size() for t in source.values()) > 100 * 1003
    for name, tensor in source.items():
        assert torch.equal(converted[name], tensor.to(torch.bfloat16)), name


def test_a_truncated_shard_is_a_one_line_error(tiny_llama3: Path, tmp_path: Path) -> None:
    from lmi_build.core.errors import LmiBuildError

    broken = tmp_path / "broken"
    broken.mkdir()
    for source in tiny_llama3.iterdir():
        if source.is_file():
            (broken / source.name).write_bytes(source.read_bytes())
    shard = broken / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4096])
    out = tmp_path / "out"
    out.mkdir()
    # The header check names the first tensor whose bytes are not in the file.
    with pytest.raises(LmiBuildError, match=r"data_offsets .* lie outside"):
        convert_checkpoint(broken, out, "bfloat16")
