"""Unquantized dtype conversion of a safetensors checkpoint, in bounded chunks.

Loading the model and calling ``save_pretrained`` holds the whole model plus safetensors' whole
serialised copy (peak RSS 1.66x the fp16 model measured); a dtype cast needs neither. Each shard
is rewritten with the same tensor names and order: the header (with the new dtypes and offsets)
is known before any data, so every tensor is read, cast and appended ``CHUNK_BYTES`` at a time
(an elementwise cast splits anywhere on an element boundary). Non-float tensors are copied unchanged.

The input is read with ``readinto`` at the header's offsets, not through safetensors' memory map:
every page of a mapped file that was read stays in the process's resident set until it is unmapped,
so reading a whole shard through ``safe_open`` peaked at 0.90x the model above the interpreter
(1.33x in all; ``benchmarks/quantize.py --cases hf-bf16``), while plain reads keep one chunk.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, BinaryIO

from lmi_build.core.errors import StepError
from lmi_build.quantize.safetensors_files import (
    FLOAT_DTYPES,
    ITEMSIZE,
    ST_DTYPE_OF_TORCH,
    TORCH_DTYPE_OF_ST,
    encode_header,
    read_header,
)

INDEX_NAME = "model.safetensors.index.json"
CHUNK_BYTES = 64 * 1024 * 1024  # input bytes cast at a time


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

    st_dtype, itemsize = ST_DTYPE_OF_TORCH[dtype]
    torch_dtype = getattr(torch, dtype)
    header_in, data_start = read_header(source)
    metadata = header_in.pop("__metadata__", None)
    names = sorted(header_in, key=lambda n: header_in[n]["data_offsets"][0])  # keep the input's order
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name in names:
        info = header_in[name]
        cast = info["dtype"] in FLOAT_DTYPES
        size = math.prod(int(d) for d in info["shape"]) * itemsize if cast else info["data_offsets"][1] - info["data_offsets"][0]
        header[name] = {"dtype": st_dtype if cast else info["dtype"], "shape": info["shape"],
                        "data_offsets": [offset, offset + size]}
        offset += size
    with open(source, "rb") as reader, open(target, "wb") as out:
        out.write(encode_header(header))
        for name in names:
            info = header_in[name]
            begin, end = (data_start + position for position in info["data_offsets"])
            reader.seek(begin)
            cast = header[name]["dtype"] == st_dtype and info["dtype"] in FLOAT_DTYPES
            if not cast or info["dtype"] == st_dtype:
                _copy_bytes(reader, out, end - begin)
            else:
                _cast_bytes(reader, out, end - begin, TORCH_DTYPE_OF_ST[info["dtype"]], torch_dtype,
                            ITEMSIZE[info["dtype"]])
    return offset


def _copy_bytes(reader: io.BufferedReader, out: BinaryIO, size: int) -> None:
    while size > 0:
        chunk = reader.read(min(size, CHUNK_BYTES))
        if not chunk:
            raise StepError(f"{Path(reader.name).name} is shorter than its header says", hint="re-download the model")
        out.write(chunk)
        size -= len(chunk)


def _cast_bytes(reader: io.BufferedReader, out: BinaryIO, size: int, source_dtype: Any, target_dtype: Any,
                itemsize: int) -> None:
    import torch

    step = max(itemsize, CHUNK_BYTES - CHUNK_BYTES % itemsize)
    buffer = bytearray(min(size, step))
    while size > 0:
        view = memoryview(buffer)[:min(size, step)]
        if reader.readinto(view) != len(view):
            raise StepError(f"{Path(reader.name).name} is shorter than its header says", hint="re-download the model")
        cast = torch.frombuffer(view, dtype=source_dtype).to(target_dtype)
        out.write(cast.view(torch.uint8).numpy().data)
        size -= len(view)
