"""Unquantized dtype conversion of a safetensors checkpoint, one tensor at a time.

Loading the model and calling ``save_pretrained`` holds the whole model plus safetensors' whole
serialised copy (peak RSS 1.66x the fp16 model measured); a dtype cast needs neither. Each shard
is rewritten with the same tensor names and order: the header (with the new dtypes and offsets)
is known before any data, so every tensor is read from the memory-mapped input, cast and
appended, and peak memory is about one tensor. Non-float tensors are copied unchanged.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from lmi_build.errors import StepError

INDEX_NAME = "model.safetensors.index.json"
# safetensors dtype names (the header's "dtype") of the target dtypes, with their sizes.
_ST_DTYPES = {"float16": ("F16", 2), "bfloat16": ("BF16", 2), "float32": ("F32", 4)}
_FLOAT_ST = ("F16", "BF16", "F32", "F64")
_ALIGN = 8  # header padded to 8 bytes, as the safetensors writer does


def convert_checkpoint(model_dir: Path, staging: Path, dtype: str) -> int:
    """Write every ``*.safetensors`` shard of ``model_dir`` into ``staging`` in ``dtype`` (plus an
    updated index and config.json); returns the bytes of weights written."""
    shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        raise StepError(f"{model_dir.name} has no *.safetensors weights; lmi-build loads safetensors only",
                        hint="convert the checkpoint to safetensors first (e.g. save_pretrained(safe_serialization=True))")
    total = sum(_convert_shard(shard, staging / shard.name, dtype) for shard in shards)
    index = model_dir / INDEX_NAME
    if index.is_file():
        data = json.loads(index.read_text())
        data.setdefault("metadata", {})["total_size"] = total
        (staging / INDEX_NAME).write_text(json.dumps(data, indent=2) + "\n")
    config = json.loads((model_dir / "config.json").read_text())
    config["torch_dtype"] = dtype
    if "dtype" in config:
        config["dtype"] = dtype
    (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation = model_dir / "generation_config.json"
    if generation.is_file():
        (staging / generation.name).write_bytes(generation.read_bytes())
    return total


def _convert_shard(source: Path, target: Path, dtype: str) -> int:
    import torch
    from safetensors import safe_open

    st_dtype, itemsize = _ST_DTYPES[dtype]
    torch_dtype = getattr(torch, dtype)
    header_in = _read_header(source)
    metadata = header_in.pop("__metadata__", None)
    names = sorted(header_in, key=lambda n: header_in[n]["data_offsets"][0])  # keep the input's order
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name in names:
        info = header_in[name]
        cast = info["dtype"] in _FLOAT_ST
        count = 1
        for dim in info["shape"]:
            count *= int(dim)
        size = count * itemsize if cast else info["data_offsets"][1] - info["data_offsets"][0]
        header[name] = {"dtype": st_dtype if cast else info["dtype"], "shape": info["shape"],
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % _ALIGN)
    with safe_open(str(source), "pt") as reader, open(target, "wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for name in names:
            tensor = reader.get_tensor(name)
            if header[name]["dtype"] == st_dtype and tensor.is_floating_point():
                tensor = tensor.to(torch_dtype)
            out.write(_tensor_bytes(tensor))
    return offset


def _tensor_bytes(tensor: Any) -> bytes | memoryview:
    import torch

    flat = tensor.contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else b""


def _read_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise StepError(f"{path.name} is not a safetensors file", hint="re-download the model")
    return header
