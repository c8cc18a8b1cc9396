"""The safetensors file format, read and written by hand where lmi-build streams tensors.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets counted from the end of the header, plus an optional ``__metadata__``), the data.
The ``safetensors`` package reads and writes whole dictionaries of tensors; streaming one tensor
(or a chunk of one) at a time needs the header by itself, so these few lines are ours.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from lmi_build.model.safetensors_header import read_checked_header

ALIGN = 8  # header padded with spaces to 8 bytes, as the safetensors writer does
ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
FLOAT_DTYPES = tuple(ITEMSIZE)
# torch dtype name -> (safetensors dtype, bytes per element)
ST_DTYPE_OF_TORCH = {"float16": ("F16", 2), "bfloat16": ("BF16", 2), "float32": ("F32", 4)}


class _TorchDtypes:
    """safetensors dtype -> torch dtype, resolved on first use (planning code imports this module
    without torch)."""

    def __getitem__(self, name: str) -> Any:
        import torch

        table = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
                 "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                 "U8": torch.uint8, "BOOL": torch.bool}
        return table[name]


TORCH_DTYPE_OF_ST = _TorchDtypes()


def encode_header(header: dict[str, Any]) -> bytes:
    """The bytes before the data: the length prefix and the JSON header, space-padded to ``ALIGN``."""
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % ALIGN)
    return struct.pack("<Q", len(encoded)) + encoded


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """The safetensors header (checked against the format) and where the data starts (tensor
    offsets count from there)."""
    return read_checked_header(path)
