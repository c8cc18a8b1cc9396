"""Fit the plan's estimate rates (``lmi_build/data/quantize_rates.toml``) from two
``benchmarks/quantize.py`` runs: one on a small model (``--model demo:tiny-llama``) and one on the
generated 0.58 B-parameter Llama. Prints the ``[cpu]`` and ``[host_memory]`` tables.

    python benchmarks/quantize_rates.py /tmp/qmem-tiny/results.jsonl /tmp/qmem-bench/results.jsonl

Per step kind (hf conversion, trtllm conversion, quantization) the time outside calibration is
``fixed + per_param x params`` through the two sizes; per method the calibration time is
``tokens x (per_token + per_token_param x params)`` through the two sizes (a method measured on one
size only gets no rate: the plan then says the time is unknown). Host memory: peak above the import
baseline per loaded weight byte, on the largest model measured, at least ``MIN_MEMORY_PARAMS``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Below this a model's weights are smaller than the interpreter's own run-to-run variation.
MIN_MEMORY_PARAMS = 100_000_000


def _load(path: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["case"]: row for row in rows}  # a case run twice: the last run


def _method(case: str) -> str:
    name = case.removeprefix("hf-")
    return "none" if name.startswith(("fp16", "bf16")) else name.split("-")[0]


def _kind(case: str, row: dict[str, Any]) -> str:
    if _method(case) != "none":
        return "quantize"
    if case.startswith("hf-"):
        return "convert_hf"
    # Rows from before the streamed writer carry no "writer": they were ModelOpt's exporter.
    return "stream_trtllm" if row.get("writer") == "stream" else "convert_trtllm"


def _through(small: tuple[float, float], large: tuple[float, float]) -> tuple[float, float]:
    """(intercept, slope) of the line through two (x, y) points, slope clamped at 0."""
    (x0, y0), (x1, y1) = small, large
    slope = max(0.0, (y1 - y0) / (x1 - x0)) if x1 != x0 else 0.0
    return max(0.0, y0 - slope * x0), slope


def fit(small: dict[str, dict[str, Any]], large: dict[str, dict[str, Any]]) -> dict[str, Any]:
    outside: dict[str, list[tuple[float, float]]] = {}
    for rows in (small, large):
        for case, row in rows.items():
            outside.setdefault(_kind(case, row), []).append((row["params"], row["step_seconds"] - row["calib_seconds"]))
    steps = {}
    for kind, points in outside.items():
        points.sort()
        fixed, per_param = _through(points[0], points[-1]) if len(points) > 1 else (points[0][1], 0.0)
        steps[kind] = {"fixed_seconds": round(fixed, 2), "seconds_per_param": float(f"{per_param:.3g}")}
    calibration = {}
    for method in sorted({_method(c) for rows in (small, large) for c in rows} - {"none"}):
        points = []
        for rows in (small, large):
            measured = [r for c, r in rows.items() if _method(c) == method and r["calib_tokens"]]
            if measured:
                row = measured[0]
                points.append((row["params"], row["calib_seconds"] / row["calib_tokens"]))
        if len(points) < 2:
            continue  # weight-only, or one size only: no rate rather than a guess at how it grows
        per_token, per_token_param = _through(points[0], points[1])
        calibration[method] = {"per_token": float(f"{per_token:.3g}"),
                               "per_token_param": float(f"{per_token_param:.3g}"),
                               "sizes": len(points)}
    factors: dict[str, tuple[int, float]] = {}  # key -> (params it was measured on, factor)
    baseline = max(row["baseline_rss_bytes"] for rows in (small, large) for row in rows.values())
    for rows in (small, large):
        for case, row in rows.items():
            target = "hf" if case.startswith("hf-") else "trtllm"
            load = "float32" if row["calib_tokens"] else row["dtype"]
            value = (row["peak_rss_bytes"] - row["baseline_rss_bytes"]) / (row["params"] * _BYTES[load])
            key = f"{target}.{_method(case)}"
            if row["params"] < MIN_MEMORY_PARAMS or row.get("writer") == "stream":
                continue  # the streamed writer holds a few tensors, not a share of the model
            # The largest model measured wins: a tiny model's factor is the interpreter's noise.
            if key not in factors or (row["params"], value) > factors[key]:
                factors[key] = (row["params"], round(max(value, 0.0), 3))
    return {"steps": steps, "calibration": calibration, "baseline_gib": round(baseline / 2**30, 2),
            "factor": {key: value for key, (_, value) in sorted(factors.items())}}


def as_toml(fitted: dict[str, Any]) -> str:
    """The fitted tables as TOML (the part of quantize_rates.toml below [source])."""
    lines = []
    for kind, values in fitted["steps"].items():
        lines += [f"[cpu.steps.{kind}]", *(f"{k} = {v}" for k, v in values.items()), ""]
    for method, values in fitted["calibration"].items():
        lines += [f"[cpu.calibration.{method}]", *(f"{k} = {v}" for k, v in values.items()), ""]
    lines += ["[host_memory]", f"baseline_gib = {fitted['baseline_gib']}", "", "[host_memory.factor]"]
    lines += [f'"{key}" = {value}' for key, value in fitted["factor"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    small, large = (_load(Path(arg)) for arg in sys.argv[1:3])
    print(as_toml(fit(small, large)))


if __name__ == "__main__":
    main()
