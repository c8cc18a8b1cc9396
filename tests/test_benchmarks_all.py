"""Every benchmark in benchmarks/ runs to completion at a tiny size, against the same peer it is
measured against (s5cmd, sha256sum, `hf --help`, awscrt on a real SeaweedFS here; the direct ModelOpt
script and a Ray cluster in test_benchmarks_quantize.py and test_benchmarks_fleet.py), so none rots
between the days it is run. No timing is asserted: only that each script finishes and hands
``python -m benchmarks`` its comparison rows, the peer measured in the same run. `make bench`
(``python -m benchmarks``) runs every script: none is left out of its order."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ROWS_ENV
from benchmarks.__main__ import HERE, ORDER, TOOLS

# The scripts run here and, torch-loading and minutes long, in test_benchmarks_quantize.py and
# test_benchmarks_fleet.py (files of their own, so the suite's workers run them side by side): a
# benchmark added to the run order without a run fails here.
SMOKE_TESTED = ("startup", "package", "storage", "storage_crt", "quantize", "fleet", "quantize_rates")


def run_benchmark(name: str, *args: str, rows: Path, timeout: float) -> str:
    """Run ``benchmarks/<name>.py`` as `make bench` does (its own interpreter); return its stdout."""
    done = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *args], capture_output=True, text=True,
                          env={**os.environ, ROWS_ENV: str(rows)}, timeout=timeout, check=False)
    assert done.returncode == 0, f"benchmarks/{name}.py {' '.join(args)} failed:\n{done.stderr[-4000:]}"
    return done.stdout


def recorded_peers(rows: Path) -> set[str]:
    """The peers of the comparison rows a run recorded, each measured (a positive time)."""
    recorded: list[dict[str, Any]] = [json.loads(line) for line in rows.read_text().splitlines()]
    assert all(row["peer_seconds"] > 0 and row["seconds"] > 0 for row in recorded), recorded
    return {row["peer"] for row in recorded}


def needs_tools(*names: str) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (the dev extra installs them: pip install -e '.[dev]')")


def test_every_benchmark_script_is_in_the_run_order() -> None:
    scripts = {path.stem for path in Path(HERE).glob("*.py") if not path.stem.startswith("_")}
    named = set(ORDER) | set(TOOLS)
    assert not set(ORDER) & set(TOOLS)
    assert scripts == named, f"benchmarks/__main__.py ORDER/TOOLS miss {sorted(scripts - named)} " \
                             f"or name missing scripts {sorted(named - scripts)}"
    assert set(SMOKE_TESTED) == named, "a benchmark without a run below"


def test_every_benchmark_script_imports() -> None:
    """A benchmark that no longer imports (a class that moved) fails here, in `make test-fast` too."""
    for name in [*ORDER, *TOOLS]:
        importlib.import_module(f"benchmarks.{name}")


def test_startup(tmp_path: Path) -> None:
    needs_tools("hf", "lmi-build")
    out = run_benchmark("startup", "--repeat", "1", rows=tmp_path / "rows.jsonl", timeout=300)
    assert "torch/transformers imported by --help or plan: no" in out
    assert recorded_peers(tmp_path / "rows.jsonl") == {"hf --help", "hf --help: CPU"}


def test_package(tmp_path: Path) -> None:
    out = run_benchmark("package", "--size-gib", "0.002", "--shards", "2", "--repeat", "1", "--json",
                        "--dir", str(tmp_path), rows=tmp_path / "rows.jsonl", timeout=300)
    assert set(json.loads(out)["seconds"]) == {"cp -r + sha256sum", "package (writable source)",
                                               "package (read-only source)", "package (copy)", "verify (rehash)"}
    assert recorded_peers(tmp_path / "rows.jsonl") == {"cp -r + sha256sum"}


@pytest.mark.s3
def test_storage(tmp_path: Path) -> None:
    needs_tools("weed", "s5cmd", "sha256sum")
    out = run_benchmark("storage", "--size-gb", "0.01", "--shards", "2", "--repeat", "1",
                        rows=tmp_path / "rows.jsonl", timeout=300)
    results = json.loads(out)
    assert results["republish_skipped"] == results["publish_objects"] > 0  # unchanged: nothing sent again
    assert recorded_peers(tmp_path / "rows.jsonl") == {
        "s5cmd cp (upload)", "s5cmd cp (download)", "s5cmd cp (download): client CPU", "sha256sum"}


@pytest.mark.s3
def test_storage_crt(tmp_path: Path) -> None:
    needs_tools("weed", "s5cmd")
    pytest.importorskip("awscrt", reason="awscrt is not installed (the dev extra installs it)")
    run_benchmark("storage_crt", "--size-gb", "0.01", "--shards", "2", "--repeat", "1",
                  rows=tmp_path / "rows.jsonl", timeout=300)
    assert recorded_peers(tmp_path / "rows.jsonl") == {"s5cmd cp (download): client CPU"}
