"""Benchmarks: plain scripts comparing lmi-build with a peer tool measured in the same run.

``python -m benchmarks`` runs them and ends with one comparison table built from the rows each
script hands to ``record_comparison``."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

ROWS_ENV = "LMI_BUILD_BENCH_ROWS"  # set by benchmarks/__main__.py: a JSON-lines file


def record_comparison(benchmark: str, measure: str, seconds: float, peer: str, peer_seconds: float) -> None:
    """One row of the summary table (nothing happens when a script runs on its own)."""
    path = os.environ.get(ROWS_ENV)
    if not path:
        return
    row = {"benchmark": benchmark, "measure": measure, "seconds": seconds, "peer": peer, "peer_seconds": peer_seconds}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")



def write_random(path: Path, size: int, *, head: bytes = b"") -> None:
    """``head``, then ``size`` random bytes (incompressible, so no transfer or file system shortcut)."""
    block = 16 * 1024 * 1024
    with open(path, "wb") as handle:
        handle.write(head)
        remaining = size
        while remaining:
            chunk = min(block, remaining)
            handle.write(os.urandom(chunk))
            remaining -= chunk


def write_safetensors(path: Path, size: int) -> None:
    """A valid safetensors file of ``size`` data bytes: one uint8 tensor of random bytes, so a model
    directory made of these passes the local source's and the hf layout's weight checks."""
    header = json.dumps({path.stem: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)  # the format pads the header to a multiple of 8 bytes
    write_random(path, size, head=struct.pack("<Q", len(header)) + header)
