"""The safetensors header, read and checked against the format before any tensor is trusted.

The format (huggingface/safetensors, docs "Format"): an 8-byte little-endian header length N, N bytes
of JSON (``{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}``), then
the data; offsets count from the end of the header. The ``safetensors`` library checks this when it
loads, but lmi-build reads headers itself (layouts, streamed conversion, verify) where a hostile file
with overlapping, negative or out-of-range offsets or an unknown dtype would otherwise be built and
"verified". The checks here are the library's rules (its ``Metadata::validate``), in Python because
the library exposes no header-only validation.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any, TypeGuard

from lmi_build.core.reading import BadFile, parse_json

# The library refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# Bytes per element of every dtype the format defines (safetensors/src/tensor.rs Dtype); sub-byte
# types are refused by lmi-build's readers anyway and are listed with their byte rounding.
DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8, "C64": 8, "F4": 0.5, "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
}


def read_checked_header(path: Path) -> tuple[dict[str, Any], int]:
    """The header of the safetensors file ``path`` and the byte where its data starts; ValueError
    (a ``BadFile``) naming the first violation of the format."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise BadFile(f"{path.name} is shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise BadFile(f"{path.name}: header length {length} exceeds the format's limit of {MAX_HEADER_BYTES}")
        if length > size - 8:
            raise BadFile(f"{path.name}: header length {length} exceeds the file size {size}")
        raw = handle.read(length)
    header = parse_json(raw, what=f"safetensors header of {path.name}")
    if not isinstance(header, dict):
        raise BadFile(f"{path.name}: the safetensors header is not a JSON object")
    check_header(header, data_bytes=size - 8 - length, name=path.name)
    return header, 8 + length


def check_header(header: dict[str, Any], *, data_bytes: int, name: str) -> None:
    """The format's rules: known dtypes, non-negative integer shapes, offsets inside the data whose
    span is the tensor's size, no two tensors overlapping, and the data fully covered."""
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise BadFile(f"{name}: __metadata__ must map strings to strings")
    spans = [(*_tensor_span(entry, data_bytes, f"{name}: tensor {tensor!r}"), tensor)
             for tensor, entry in header.items() if tensor != "__metadata__"]
    position = 0
    for begin, end, tensor in sorted(spans):
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else "leaves a gap before it"
            raise BadFile(f"{name}: tensor {tensor!r} {what} (offset {begin}, expected {position})")
        position = end
    if position != data_bytes:
        raise BadFile(f"{name}: the tensors cover {position} of the file's {data_bytes} data bytes")


def _int_list(value: object) -> TypeGuard[list[int]]:  # JSON's true and false are no integers here
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _tensor_span(entry: object, data_bytes: int, where: str) -> tuple[int, int]:
    """(begin, end) of one tensor's entry, once its dtype, shape and offsets obey the format."""
    if not isinstance(entry, dict):
        raise BadFile(f"{where} has no dtype/shape/data_offsets")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise BadFile(f"{where} has the unknown dtype {str(dtype)[:20]!r}")
    if not _int_list(shape) or min(shape, default=0) < 0:
        raise BadFile(f"{where} has an invalid shape")
    if not _int_list(offsets) or len(offsets) != 2:
        raise BadFile(f"{where} has invalid data_offsets")
    begin, end = offsets
    if begin < 0 or end < begin or end > data_bytes:
        raise BadFile(f"{where} data_offsets [{begin}, {end}] lie outside the {data_bytes} bytes of data")
    expected = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
    if end - begin != expected:
        raise BadFile(f"{where} spans {end - begin} bytes, its shape and dtype need {expected}")
    return begin, end
