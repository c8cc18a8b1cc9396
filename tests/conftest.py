"""Shared pytest configuration. Fixture modules are registered here, one line each."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
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

# lmi-build turns botocore's CRT off before botocore's first import (lmi_build/storage/client.py); the
# CLI tests run lmi-build in this process, where the S3 fixtures import botocore first: the same setting.
os.environ.setdefault("BOTO_DISABLE_CRT", "true")

# The suite run as a GitHub Actions job: its commands must print what they print elsewhere (the tests
# of the workflow commands and the step summary set these variables themselves).
for _actions in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
    os.environ.pop(_actions, None)

# Data the tests read, kept in the repository so that a fresh clone passes (see tests/fixtures/README.md).
FIXTURE_CONFIGS = FIXTURES_DIR / "hf-configs"
SEEDS_DIR = FIXTURES_DIR / "seeds"


# The demo model most CLI tests build from, with its weights: generating it imports torch and
# transformers and trains a tokenizer (about half a minute), so it is generated once per checkout, in a
# process of its own, into pytest's cache directory, and copied into each session's lmi-build cache
# (6 MB). The directory name carries the generator's version, so a changed generator writes anew.
PREBUILT_DEMO = "tiny-llama"


@pytest.fixture(scope="session")
def _session_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lmi_build.sources.demo import GENERATOR_VERSION

    cache = tmp_path_factory.getbasetemp() / "lmi-build-cache"
    pytest_cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider: this session only
    store = pytest_cache.mkdir("demo-models") if pytest_cache is not None else cache.parent / "demo-models"
    store.mkdir(exist_ok=True)
    name = f"{PREBUILT_DEMO}-v{GENERATOR_VERSION}"
    with open(store / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one xdist worker generates, the others wait for it
        if not (store / "demo" / name).is_dir():
            generated = subprocess.run(
                [sys.executable, "-c", "import sys; from lmi_build.sources.demo import ensure_demo_model; "
                 "ensure_demo_model(sys.argv[1], with_weights=True)", PREBUILT_DEMO],
                env={**os.environ, "LMI_BUILD_CACHE": str(store)}, capture_output=True, text=True, check=False)
            if generated.returncode != 0:
                raise RuntimeError(f"generating demo:{PREBUILT_DEMO} failed: {generated.stderr[-2000:]}")
    shutil.copytree(store / "demo" / name, cache / "demo" / name)
    return cache


@pytest.fixture(autouse=True)
def _isolated_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session gets its own lmi-build cache unless a test sets one itself."""
    if "LMI_BUILD_CACHE" not in os.environ:
        monkeypatch.setenv("LMI_BUILD_CACHE", str(request.getfixturevalue("_session_cache")))
    # A config file of the machine running the tests (~/.config/lmi-build/config.toml) never applies:
    # the standing defaults are an empty directory's unless a test writes its own.
    if "LMI_BUILD_CONFIG" not in os.environ:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "xdg-config"))


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
