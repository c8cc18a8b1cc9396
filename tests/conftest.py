"""Shared pytest configuration. Fixture modules are registered here, one line each."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.paths import FIXTURES_DIR

# Append "tests.fixtures_<area>" (tests/ is a package).
pytest_plugins: list[str] = [
    "tests.fixtures_hub",
    "tests.fixtures_s3",
    "tests.fixtures_artifact",
    "tests.fixtures_planning",
    "tests.fixtures_quantize",
    "tests.fixtures_trtllm",
    "tests.fixtures_neuronx",
    "tests.fixtures_ray",
]

# Tools installed with the test environment (weed, s5cmd, lmi-build) and the stand-ins' python3
# shebang must resolve to this interpreter's environment even when it is not activated.
_ENV_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _ENV_BIN:
    os.environ["PATH"] = os.pathsep.join([_ENV_BIN, os.environ.get("PATH", "")])

# pytest caches its assertion rewrite of each test module as bytecode beside it (gitignored
# __pycache__/), unless bytecode writing is off: with PYTHONDONTWRITEBYTECODE=1 every worker of every
# run rewrote all ~130 test modules again (about 3 s of CPU a worker, before its first test). The
# test processes write bytecode whatever that variable says; the commands they start still see it.
sys.dont_write_bytecode = False

# One compute thread per xdist worker, in the worker and in every command it starts: with the
# default (a thread per core in each of N workers) OpenMP's spinning threads fight over the cores,
# and the quantization and pipeline tests ran 1.5x slower on 2 cores (196.8 s against 127.3 s for
# test_quantize_export.py + test_pipeline_build.py with -n 2).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")
    if "torch" in sys.modules:  # imported before this file: tell it directly
        sys.modules["torch"].set_num_threads(1)

# Data the tests read, kept in the repository so that a fresh clone passes (see tests/fixtures/README.md).
FIXTURE_CONFIGS = FIXTURES_DIR / "hf-configs"
SEEDS_DIR = FIXTURES_DIR / "seeds"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session gets its own lmi-build cache unless a test sets one itself."""
    if "LMI_BUILD_CACHE" not in os.environ:
        monkeypatch.setenv("LMI_BUILD_CACHE", str(tmp_path_factory.getbasetemp() / "lmi-build-cache"))
    # A config file of the machine running the tests (~/.config/lmi-build/config.toml) never applies:
    # the standing defaults are an empty directory's unless a test writes its own.
    if "LMI_BUILD_CONFIG" not in os.environ:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "xdg-config"))


# Files of independent tests (no module-scoped fixture) that take minutes in all: their tests are
# spread over the xdist workers one by one and start first. Every other file stays whole on one
# worker, so its module fixtures (a Ray cluster, a built artifact) start once, as with
# `--dist loadfile`. Measured by `make unit --durations`: test_quantize_export.py alone held one
# worker for about 11 minutes while the other had finished.
SPREAD_FILES = (
    "test_quantize_export.py", "test_plan_saved.py", "test_pipeline_build.py", "test_cli_surface.py",
    "test_readme_blocks.py", "test_readme_quickstart.py", "test_cli_model_inputs.py", "test_spec_shapes.py",
    "test_hostile_portable.py", "test_plan_checkpoint_estimate.py", "test_build_cache_s3.py",
    "test_neuronx_corpus.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name not in SPREAD_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    # A stable sort: the long, spread files first, so they do not form the run's tail.
    items.sort(key=lambda item: item.path.name not in SPREAD_FILES)


# The inner loop (`make test-fast`, -m "not slow ...") stays free of torch: a test it runs that
# imports torch or transformers in the test process errors, naming the marker to add. Only checked
# when the slow tests are left out, where the first import in a worker is always a fast test's.
_HEAVY = ("torch", "transformers")
_HEAVY_BEFORE = pytest.StashKey[bool]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_HEAVY_BEFORE] = any(name in sys.modules for name in _HEAVY)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if "not slow" not in (item.config.option.markexpr or "") or item.stash.get(_HEAVY_BEFORE, True):
        return
    loaded = [name for name in _HEAVY if name in sys.modules]
    if loaded:
        raise RuntimeError(f"{item.nodeid} imported {', '.join(loaded)}: mark it @pytest.mark.slow "
                           "(make test-fast leaves out the tests that load torch)")
