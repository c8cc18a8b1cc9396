"""Run every benchmark in turn: `python -m benchmarks [NAME ...]` (names: startup, package,
storage, storage_crt, quantize, fleet), then print one table of every comparison with its ratio.
Each is a plain script that prints its own numbers and ratios against a peer tool measured in the
same run; see the docstring at the top of each file. `make bench` runs them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("startup", "package", "storage", "storage_crt", "quantize", "fleet")
# Scripts here that are not comparisons against a peer, so not run by `make bench`: quantize_rates
# fits the plan's estimate rates from two quantize.py result files (its docstring says how).
TOOLS = ("quantize_rates",)
sys.path.insert(0, str(HERE.parent))

from benchmarks import ROWS_ENV  # noqa: E402 - the repo root is on sys.path only from here on


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def summary(rows: list[dict[str, object]]) -> str:
    """One table: every comparison, with lmi-build's time over the peer's (lower is better)."""
    header = ("benchmark", "lmi-build", "time", "peer (same run)", "time", "ratio")
    table = [header] + [
        (str(r["benchmark"]), str(r["measure"]), _seconds(float(str(r["seconds"]))), str(r["peer"]),
         _seconds(float(str(r["peer_seconds"]))), f"{float(str(r['seconds'])) / float(str(r['peer_seconds'])):.2f}x")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right = {2, 4, 5}
    lines = ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(names: list[str]) -> int:
    chosen = names or [name for name in ORDER if (HERE / f"{name}.py").exists()]
    unknown = [name for name in chosen if not (HERE / f"{name}.py").exists()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(ORDER)}", file=sys.stderr)
        return 2
    status = 0
    with tempfile.TemporaryDirectory(prefix="lmi-bench-") as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        # The peers (hf, s5cmd, weed) and lmi-build live beside this interpreter: no venv activation needed.
        env = {**os.environ, ROWS_ENV: str(rows_file),
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        for name in chosen:
            print(f"== benchmarks/{name}.py", flush=True)
            status |= subprocess.run([sys.executable, str(HERE / f"{name}.py")], check=False, env=env).returncode
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    if rows:
        print(f"\n== comparison ({' '.join(chosen)}): ratio = lmi-build time / peer time, lower is better")
        print(summary(rows))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
