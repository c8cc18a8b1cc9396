"""benchmarks/quantize.py and quantize_rates.py run to completion on demo:tiny-llama (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_benchmarks_all import run_benchmark

# The code paths of quantize.py's cases: the trtllm and the hf branch of run_case (a calibrated
# quantization, an hf conversion; the other trtllm cases differ from awq only in run_case's arguments)
# and the peer, the direct ModelOpt script (run_direct). A child that quantizes imports ModelOpt
# (~16 s of CPU on 2 cores): the streamed fp16 case, which computes its layout with ModelOpt's
# exporter, is left to tests/targets/trtllm/test_trtllm_stream.py.
QUANTIZE_CASES = "awq,awq-direct,hf-bf16"


# One test, not one per script: quantize_rates.py reads quantize.py's results, and a module fixture
# shared by two tests ran twice when the suite's workers split them (two ~35 s runs of quantize.py).
@pytest.mark.slow
def test_quantize_then_its_rates(tmp_path: Path) -> None:
    """quantize.py on demo:tiny-llama, each of its code paths once, with a token's worth of calibration; then
    the rates fitted from its own results (one size given twice: no slope, still a table)."""
    out = tmp_path / "quantize-bench"
    out.mkdir()
    printed = run_benchmark("quantize", "--out", str(out), "--model", "demo:tiny-llama", "--cases", QUANTIZE_CASES,
                            "--calib-size", "2", "--calib-max-seq-len", "16", rows=out / "rows.jsonl", timeout=1800)
    assert "import baseline" in printed
    results = out / "results.jsonl"
    rows = {row["case"]: row for row in map(json.loads, results.read_text().splitlines())}
    assert ",".join(rows) == QUANTIZE_CASES
    assert rows["awq"]["quant_algo"] == rows["awq-direct"]["quant_algo"] == "W4A16_AWQ"
    assert rows["awq-direct"]["writer"] == "modelopt (direct script)"
    assert all(row["out_bytes"] > 0 and row["peak_rss_bytes"] > 0 for row in rows.values())

    rates = run_benchmark("quantize_rates", str(results), str(results), rows=tmp_path / "rows.jsonl", timeout=120)
    assert "[cpu.steps.quantize]" in rates and "[host_memory]" in rates
