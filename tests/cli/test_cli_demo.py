"""``lmi-build demo list`` names every demo model, and each one plans offline as listed."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lmi_build.sources.demo import DEMO_MODELS
from tests.cli_process import run_lmi_build


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "80"}
    return run_lmi_build(*args, env=env, timeout=120)


def test_demo_list_names_every_demo_model() -> None:
    result = _run("--json", "demo", "list")
    assert result.returncode == 0, result.stderr
    listed = {row["model"]: row for row in json.loads(result.stdout)["demo_models"]}
    assert set(listed) == {f"demo:{name}" for name in DEMO_MODELS}
    assert all(row["architecture"].endswith(("ForCausalLM", "LMHeadModel")) for row in listed.values())
    table = _run("demo", "list")
    assert table.returncode == 0 and all(f"demo:{name}" in table.stdout for name in DEMO_MODELS)


@pytest.mark.parametrize("name", sorted(DEMO_MODELS))
def test_every_listed_demo_model_plans_offline(name: str) -> None:
    result = _run("plan", "hf", "--model", f"demo:{name}", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["model"]["id"] == f"demo:{name}"
