"""benchmarks/quantize.py and quantize_rates.py run to completion on demo:tiny-llama (no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_benchmarks_all import run_benchmark

# The code paths of quantize.py's cases: the streamed TensorRT-LLM writer, a calibrated quantization,
# its peer (the direct ModelOpt script) and the hf conversion.
QUANTIZE_CASES = "fp16,awq,awq-direct,hf-bf16"


@pytest.fixture(scope="module")
def quantize_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """quantize.py on demo:tiny-llama, each code path once, with a token's worth of calibration."""
    out = tmp_path_factory.mktemp("quantize-bench")
    printed = run_benchmark("quantize", "--out", str(out), "--model", "demo:tiny-llama", "--cases", QUANTIZE_CASES,
                            "--calib-size", "2", "--calib-max-seq-len", "16", rows=out / "rows.jsonl", timeout=1800)
    assert "import baseline" in printed
    return out / "results.jsonl"


@pytest.mark.slow
def test_quantize(quantize_results: Path) -> None:
    rows = {row["case"]: row for row in map(json.loads, quantize_results.read_text().splitlines())}
    assert ",".join(rows) == QUANTIZE_CASES
    assert rows["awq"]["quant_algo"] == rows["awq-direct"]["quant_algo"] == "W4A16_AWQ"
    assert rows["awq-direct"]["writer"] == "modelopt (direct script)"
    assert all(row["out_bytes"] > 0 and row["peak_rss_bytes"] > 0 for row in rows.values())


@pytest.mark.slow
def test_quantize_rates(quantize_results: Path, tmp_path: Path) -> None:
    """The rates fitted from quantize.py's own results (one size given twice: no slope, still a table)."""
    out = run_benchmark("quantize_rates", str(quantize_results), str(quantize_results),
                        rows=tmp_path / "rows.jsonl", timeout=120)
    assert "[cpu.steps.stream_trtllm]" in out and "[cpu.steps.quantize]" in out and "[host_memory]" in out
