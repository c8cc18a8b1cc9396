"""benchmarks/fleet.py runs to completion on its smallest matrix (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_benchmarks_all import needs_tools, recorded_peers, run_benchmark


@pytest.mark.slow
@pytest.mark.s3
def test_fleet(tmp_path: Path) -> None:
    needs_tools("weed")
    pytest.importorskip("ray", reason="the fleet extra is not installed: pip install -e '.[fleet]'")
    out = run_benchmark("fleet", "--models", "demo:tiny-llama", "--dtypes", "fp16", "--tps", "1",
                        rows=tmp_path / "rows.jsonl", timeout=1800)
    results = json.loads(out[out.index("{"):])
    assert results["builds"] == 2 and results["rerun_statuses"] == {"cached": 1, "stand_in": 1}
    assert recorded_peers(tmp_path / "rows.jsonl") == {"2 sequential lmi-build"}
