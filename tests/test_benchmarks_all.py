"""`make bench` (``python -m benchmarks``) runs every benchmark script: none is left out of its
order, and every name in it is a script that exists."""

from __future__ import annotations

from pathlib import Path

from benchmarks.__main__ import HERE, ORDER, TOOLS


def test_every_benchmark_script_is_in_the_run_order() -> None:
    scripts = {path.stem for path in Path(HERE).glob("*.py") if not path.stem.startswith("_")}
    named = set(ORDER) | set(TOOLS)
    assert not set(ORDER) & set(TOOLS)
    assert scripts == named, f"benchmarks/__main__.py ORDER/TOOLS miss {sorted(scripts - named)} " \
                             f"or name missing scripts {sorted(named - scripts)}"


def test_every_benchmark_script_imports() -> None:
    """A benchmark that no longer imports (a class that moved) fails here, not on the day it is run."""
    import importlib

    for name in [*ORDER, *TOOLS]:
        importlib.import_module(f"benchmarks.{name}")
