"""`make bench` (``python -m benchmarks``) runs every benchmark script: none is left out of its
order, and every name in it is a script that exists."""

from __future__ import annotations

from pathlib import Path

from benchmarks.__main__ import HERE, ORDER


def test_every_benchmark_script_is_in_the_run_order() -> None:
    scripts = {path.stem for path in Path(HERE).glob("*.py") if not path.stem.startswith("_")}
    assert scripts == set(ORDER), f"benchmarks/__main__.py ORDER misses {sorted(scripts - set(ORDER))} " \
                                  f"or names missing scripts {sorted(set(ORDER) - scripts)}"
