"""A knob stays typed from the flag to the engine's argv (issue 33): ``--max-input-len`` is an int field of
the target's own request (``TrtllmRequest``), the planner reads the resolved options into the target's
typed ``TrtllmOptions`` through the one mapping (``targets/trtllm/options.py``), the plan's ``TrtllmBuild``
carries the fitted length, and trtllm-build's argv and serving.properties are written from that field.
No module of any target but its ``options.py`` reads or writes an option by its key, so mypy catches a
mistyped knob."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmi_build.cli.plan_flags import plan_request_from
from lmi_build.planner.make import plan_request
from lmi_build.planning.context import read_text, read_written, written_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets import get_target
from lmi_build.targets.trtllm.knobs import TrtllmBuild, TrtllmRequest
from lmi_build.targets.trtllm.options import TrtllmOptions
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps
from tests.conftest import FIXTURE_CONFIGS
from tests.paths import REPO_ROOT

TARGETS_DIR = REPO_ROOT / "lmi_build" / "targets"
# A read or write of an option by a literal key: ctx.value("max_input_len"), ctx.derive("dtype", ...).
LITERAL_KEY = re.compile(r"\.(value|user_set|is_set|"
                         r"source_of|derive|withhold)\(\s*f?\"")
# A key looked up in serving.properties text, made by formatting or written by hand: properties.get("option.dtype"),
# sources.get(f"option.{flag}"), key = f"option.{name}", {"option.tensor_parallel_degree": ...},
# values["option.model_id"] = ... (the mapping's ``planning.context.written_text`` writes keys).
PROPERTIES_KEY = re.compile(r"\.get\(\s*f?\"option\.|f\"option\.\{|\"option\.\w+\"\s*:\s|\[\s*\"option\.\w+\"\s*\]")


def _engine_argv(build: TrtllmBuild, plan: BuildPlan, profile: str) -> list[str]:
    steps = plan_steps(plan.model_copy(update={"build": build}), get_profile(profile)).steps
    return next(step.argv for step in steps if step.name == "engine")


def test_max_input_len_walks_typed_from_the_flag_to_the_argv() -> None:
    model = FIXTURE_CONFIGS / "meta-llama--Llama-2-7b-hf"
    request = plan_request_from({"model": str(model), "max_input_len": 2048}, target="trtllm", env={})
    assert request.own(TrtllmRequest).max_input_len == 2048  # the flag's int, on the target's own request
    plan = plan_request(request, get_target("trtllm")).plan
    build = plan.knobs(TrtllmBuild)
    assert build.max_input_len == 2048
    assert plan.options["option.max_input_len"] == "2048"  # written from the typed field (TrtllmOptions)
    argv = _engine_argv(build, plan, plan.toolchain.profile)
    assert argv[argv.index("--max_input_len") + 1] == "2048"
    # The argv is the field's, not a string looked up again: another value in the knobs is what it says.
    argv = _engine_argv(build.model_copy(update={"max_input_len": 777}), plan, plan.toolchain.profile)
    assert argv[argv.index("--max_input_len") + 1] == "777"


# In the shared layers: a key looked up by hand (the flags' help, cli/flag_help.py, is keyed by the option a flag
# sets, as the option table is).
SHARED_KEY = re.compile(r"\.get\(\s*f?\"option\.|\[\s*\"option\.\w+\"\s*\]")


def _offenders(paths: list[Path], *patterns: re.Pattern[str]) -> list[str]:
    return [f"{path}:{number}: {line.strip()}" for path in paths
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if any(pattern.search(line) for pattern in patterns)]


def test_no_option_is_read_or_written_by_its_key_outside_the_mapping() -> None:
    """Neither in a target nor in the shared layers (their options: ``planning/options.py``); the option
    table's own package (``lmi_build/options/``) works on keys as such."""
    targets = [path for path in sorted(TARGETS_DIR.glob("*/*.py")) if path.name != "options.py"]
    shared = [path for path in sorted((REPO_ROOT / "lmi_build").rglob("*.py"))
              if TARGETS_DIR not in path.parents and path.parent.name != "options" and path.name != "options.py"]
    assert _offenders(targets, LITERAL_KEY, PROPERTIES_KEY) == []
    assert _offenders(shared, LITERAL_KEY, SHARED_KEY) == []


def test_mypy_catches_a_mistyped_knob(tmp_path: Path) -> None:
    snippet = tmp_path / "mistyped.py"
    snippet.write_text(
        "from lmi_build.targets.trtllm.knobs import TrtllmBuild, TrtllmRequest\n"
        "from lmi_build.targets.trtllm.options import TrtllmOptions\n\n\n"
        "def walk(asked: TrtllmRequest, given: TrtllmOptions, build: TrtllmBuild) -> None:\n"
        "    print(asked.max_imput_len, given.max_imput_len, build.max_imput_len)\n"
        "    TrtllmOptions(max_imput_len=1)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 1
    assert done.stdout.count('"max_imput_len"') == 4, done.stdout


def test_one_model_reads_typed_reads_as_written_and_writes() -> None:
    """``TrtllmOptions`` is every view of its keys (issue 41): typed from serving.properties text, the same
    text as written (a start-up model types it its own way), and the text it writes, in field order."""
    properties = {"option.enable_kv_cache_reuse": " True ", "option.max_rolling_batch_size": "08",
                  "option.tensor_parallel_degree": "max", "option.rolling_batch": "trtllm"}
    typed = read_written(properties, TrtllmOptions)
    assert (typed.enable_kv_cache_reuse, typed.max_rolling_batch_size, typed.tensor_parallel_degree) == (True, 8, "max")
    text = read_text(properties, TrtllmOptions)
    assert (text.enable_kv_cache_reuse, text.max_rolling_batch_size, text.max_num_tokens) == (" True ", "08", None)
    with pytest.raises(AttributeError, match="TrtllmOptions has no option 'max_imput_len'"):
        _ = text.max_imput_len
    written = written_text(TrtllmOptions(tensor_parallel_degree=2, engine="MPI", rolling_batch="trtllm",
                                         entry_point="djl_python.x", max_input_len=2048))
    assert list(written) == ["engine", "option.rolling_batch", "option.tensor_parallel_degree",
                             "option.max_input_len", "option.entryPoint"]
