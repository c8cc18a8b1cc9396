"""Benchmarks: plain scripts comparing lmi-build with a peer tool measured in the same run.

``python -m benchmarks`` runs them and ends with one comparison table built from the rows each
script hands to ``record_comparison``."""

from __future__ import annotations

import json
import os

ROWS_ENV = "LMI_BUILD_BENCH_ROWS"  # set by benchmarks/__main__.py: a JSON-lines file


def record_comparison(benchmark: str, measure: str, seconds: float, peer: str, peer_seconds: float) -> None:
    """One row of the summary table (nothing happens when a script runs on its own)."""
    path = os.environ.get(ROWS_ENV)
    if not path:
        return
    row = {"benchmark": benchmark, "measure": measure, "seconds": seconds, "peer": peer, "peer_seconds": peer_seconds}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
