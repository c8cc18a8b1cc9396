"""What the commands print is for the user (issue 24 item 8): no fact about the machine the project
was developed on, counts a person can read, a cache hit that says what ran now, and a serving.properties
without build-time knobs."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from lmi_build.artifact.packager import serving_properties
from lmi_build.planning.plan import BuildPlan
from lmi_build.reporting.output import human_bytes, human_count
from lmi_build.targets.hf.layouts import LAYOUTS as HF_LAYOUTS
from lmi_build.targets.trtllm.layouts import FLAT
from tests.cli_process import run_lmi_build
from tests.fixtures_planning import Planner
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DATA_DIRS = (REPO / "lmi_build" / "data", REPO / "recipes", REPO / "lmi_build" / "targets")
# Words that describe where and by whom the project was developed, not a vendor fact: a CPU model,
# the sandbox it ran in, the sessions beside it.
DEVELOPER_MACHINE = re.compile(r"\b(EPYC|Xeon|Ryzen|vCPUs? (AMD|Intel)|agents?|sessions?'?|sandbox)\b", re.IGNORECASE)


def _cli(*args: str, cwd: Path | None = None, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "HF_", "SM_"))}
    env["COLUMNS"] = "200"
    if cache is not None:  # a cache of the test's own: the session's may hold the artifact already
        env["LMI_BUILD_CACHE"] = str(cache)
    return run_lmi_build(*args, env=env, timeout=600, cwd=cwd)


def test_no_data_file_describes_the_development_machine() -> None:
    found = []
    for directory in DATA_DIRS:
        for path in sorted(directory.rglob("*")):
            if path.is_file() and path.suffix in (".toml", ".json", ".txt", ".md"):
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if DEVELOPER_MACHINE.search(line):
                        found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_plan_says_where_the_rates_come_from_in_neutral_words() -> None:
    result = _cli("plan", "trtllm", "--model", "demo:tiny-llama", "--quantize", "fp8")
    assert result.returncode == 0, result.stderr
    shown = result.stdout + result.stderr
    basis = [line for line in shown.splitlines() if line.startswith("basis")]
    assert basis and "measured 2026-11-23 on a 2-core x86-64 CPU host" in basis[0]
    assert "torch 2.13.0" in basis[0]  # the library versions stay: they are what the rates mean
    assert not DEVELOPER_MACHINE.search(shown), [line for line in shown.splitlines() if DEVELOPER_MACHINE.search(line)]


@pytest.mark.parametrize(("count", "text"), [
    (0, "0"), (512, "512"), (4_096, "4.10 K"), (3_100_000, "3.10 M"), (124_439_808, "124 M"),
    (6_738_415_616, "6.74 B"), (46_702_792_704, "46.7 B"), (405_000_000_000, "405 B"), (1_200_000_000_000, "1.20 T"),
])
def test_counts_read_as_people_write_them(count: int, text: str) -> None:
    assert human_count(count) == text


def test_sizes_read_in_binary_units() -> None:
    assert [human_bytes(n) for n in (512, 6 * 2**20, 13 * 2**30)] == ["512 B", "6.0 MiB", "13.0 GiB"]


def test_a_small_models_parameters_and_weights_are_not_zero() -> None:
    """demo:tiny-llama has about 3.1 M parameters: `plan` used to say `0.00 B` and `0.00 GiB`."""
    result = _cli("plan", "hf", "--model", "demo:tiny-llama")
    assert result.returncode == 0, result.stderr
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in result.stdout.splitlines()
                if line.startswith(("parameters", "weights ")))
    assert re.fullmatch(r"\d\.\d\d M", rows["parameters"]), rows
    assert re.fullmatch(r"\d+\.\d MiB \(\d\.\d\d M params\)", rows["weights"]), rows
    assert "0.00" not in rows["parameters"] + rows["weights"]


@pytest.mark.slow  # a fresh cache: the demo model is generated with torch
def test_a_cache_hit_reports_the_cache_step_and_the_original_builds_as_its_own(tmp_path: Path) -> None:
    first = _cli("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "a"), "--json", cache=tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)
    assert built["status"] == "artifact" and "original_build" not in built

    again = _cli("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "b"), "--json", cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    cached = json.loads(again.stdout)
    assert cached["status"] == "cached"
    assert [step["name"] for step in cached["steps"]] == ["cache"]  # what ran now
    assert cached["original_build"]["steps"] == built["steps"] and cached["original_build"]["at"]

    human = _cli("hf", "--model", "demo:tiny-llama", "--output", str(tmp_path / "c"), cache=tmp_path / "cache")
    assert human.returncode == 0, human.stderr
    title, _, rest = human.stdout.partition("original build, ")
    assert "cache" in title and "fetch" not in title  # the fetch ran in the original build, not now
    assert "(not run now)" in rest and "fetch" in rest


def _written(plan: BuildPlan) -> dict[str, str]:
    """The serving.properties the plan's artifact gets (the target's default-profile layout)."""
    return serving_properties(plan, FLAT if plan.target == "trtllm" else next(iter(HF_LAYOUTS.values())))


def test_build_time_knobs_stay_out_of_the_vllm_serving_properties(plan_model: Planner) -> None:
    """The hf target's containers load the AWQ checkpoint lmi-build made: awq_calib_size (and the
    calibration knobs) steered the build only. TensorRT-LLM's container documents it: it stays there."""
    hf = plan_model("hf", "meta-llama--Llama-2-7b-hf", quantize="awq", profile="lmi-0.35.0-vllm-0.11.1")
    assert hf.valid, hf.errors
    assert hf.options["option.awq_calib_size"] == "32"  # planned: it shapes the calibration (cache key)
    written = _written(hf)
    assert written["engine"] == "Python"
    assert not {key for key in written if "calib" in key}, written

    trtllm = plan_model("trtllm", "meta-llama--Llama-2-7b-hf", quantize="awq")
    assert trtllm.valid, trtllm.errors
    assert _written(trtllm)["option.awq_calib_size"] == "32"



def test_plan_marks_the_build_only_keys_it_lists() -> None:
    result = _cli("plan", "hf", "--model", "demo:tiny-llama", "--quantize", "awq", "--profile", "lmi-0.35.0-vllm-0.11.1")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith(("option.", "engine"))}
    assert rows["option.awq_calib_size"].split()[1:] == ["32", "default,", "build", "only"]
    assert "build only" not in rows["option.dtype"]
