"""`config show` and `plan` agree (issue 24 item 4): with --model, config show resolves through the
planner (the values serving.properties gets); without, it shows the option layers and names every key
whose value the plan writes otherwise. A user value the plan replaces is a warning naming the key, both
values and why."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import run_lmi_build
from tests.fixtures_planning import Planner, warning_codes

DEMO = "demo:tiny-llama"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    env.pop("TENSOR_PARALLEL_DEGREE", None)
    env["COLUMNS"] = "200"
    return run_lmi_build(*args, env=env, timeout=300)


def _json(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def mpi_properties(tmp_path: Path) -> Path:
    path = tmp_path / "serving.properties"
    path.write_text("engine=MPI\noption.rolling_batch=trtllm\n")
    return path


@pytest.mark.parametrize("target", ["trtllm", "neuronx", "hf"])
def test_config_show_with_a_model_is_the_plans_options(target: str, mpi_properties: Path) -> None:
    extra = ("--properties", str(mpi_properties)) if target == "trtllm" else ()
    plan = _cli("plan", target, "--model", DEMO, *extra, "--json")
    shown = _cli("config", "show", "--target", target, "--model", DEMO, *extra, "--json")
    assert plan.returncode == shown.returncode == 0, plan.stderr + shown.stderr
    planned, config = _json(plan), _json(shown)
    assert config["resolved_by"] == "plan" and config["model"] == DEMO
    assert {key: row["value"] for key, row in config["options"].items()} == planned["options"]
    assert {key: row["source"] for key, row in config["options"].items()} == planned["option_sources"]
    assert config["warnings"] == planned["warnings"]


def test_config_show_without_a_model_names_what_the_plan_changes() -> None:
    """The issue's report: config show said MPI, trtllm, 64, 512; plan wrote Python, disable, 32, 1024."""
    result = _cli("config", "show", "--target", "trtllm", "--no-env", "--json")
    assert result.returncode == 0, result.stderr
    data = _json(result)
    assert data["resolved_by"] == "options" and data["profile"] == "lmi-0.33.0-trtllm-0.21.0"
    differs = data["plan_differs"]
    assert differs["engine"] == {"shown": "MPI", "plan": "Python"}
    assert differs["option.rolling_batch"] == {"shown": "trtllm", "plan": "disable"}
    assert differs["option.tokens_per_block"] == {"shown": "64", "plan": "32"}
    assert differs["option.max_output_len"] == {"shown": "512", "plan": "1024"}
    # Every other key shown is what the plan writes.
    plan = _json(_cli("plan", "trtllm", "--model", DEMO, "--json"))
    for key, row in data["options"].items():
        if key not in differs:
            assert plan["options"][key] == row["value"], key

    human = _cli("config", "show", "--target", "trtllm", "--no-env")
    assert "engine MPI -> Python" in human.stderr and "option.rolling_batch trtllm -> disable" in human.stderr
    assert "--model MODEL" in human.stderr


def test_config_show_on_an_older_profile_names_fewer_changes() -> None:
    data = _json(_cli("config", "show", "--target", "trtllm", "--no-env", "--profile", "lmi-0.30.0-trtllm-0.12.0",
                      "--json"))
    assert "engine" not in data["plan_differs"] and "option.rolling_batch" not in data["plan_differs"]


def test_a_rewritten_engine_and_rolling_batch_are_warned_with_both_values(mpi_properties: Path) -> None:
    result = _cli("plan", "trtllm", "--model", DEMO, "--properties", str(mpi_properties), "--json")
    assert result.returncode == 0, result.stderr
    plan = _json(result)
    assert plan["options"]["engine"] == "Python" and plan["options"]["option.rolling_batch"] == "disable"
    rewritten = {w["message"].split("=", 1)[0]: w["message"] for w in plan["warnings"] if w["code"] == "option_rewritten"}
    assert rewritten["engine"].startswith("engine=MPI (from serving.properties:1) is rewritten to engine=Python: "
                                          "profile lmi-0.33.0-trtllm-0.21.0")
    assert rewritten["option.rolling_batch"].startswith(
        "option.rolling_batch=trtllm (from serving.properties:2) is rewritten to option.rolling_batch=disable: "
        "profile lmi-0.33.0-trtllm-0.21.0")
    # engine=MPI also set mpi_mode=true (LMI's alias): one LLM API process must not run in MPI mode.
    assert plan["options"]["option.mpi_mode"] == "false" and "option.mpi_mode" in rewritten


def test_values_the_plan_keeps_or_resolves_are_not_rewrites(plan_model: Planner, tmp_path: Path) -> None:
    properties = tmp_path / "serving.properties"
    properties.write_text("engine=MPI\noption.rolling_batch=trtllm\noption.tensor_parallel_degree=max\n")
    # The toolkit layout runs engine=MPI with rolling_batch=trtllm: nothing is replaced; tp=max is resolved.
    old = plan_model("trtllm", "meta-llama--Llama-2-7b-hf", properties=properties, instance_type="g5.12xlarge",
                     profile="lmi-0.30.0-trtllm-0.12.0")
    assert old.options["engine"] == "MPI" and old.options["option.tensor_parallel_degree"] == "4"
    assert "option_rewritten" not in warning_codes(old), old.warnings
    same = plan_model("trtllm", "meta-llama--Llama-2-7b-hf", tp="2", option=("option.rolling_batch=disable",))
    assert "option_rewritten" not in warning_codes(same), same.warnings
