"""Every vendor command a valid trtllm plan generates, for the fixture configs (tests/fixtures/hf-configs)
on every TensorRT-LLM profile, is one that release's own argparse accepts, as extracted from its
source (tests/vendor/trtllm: build_flags.json for trtllm-build and 0.7.1's build.py, script_flags.json
per example script, converter_flags.json's hand-read copies where no tree was read), checked by the
stand-ins' vendor_argparse, never by lmi-build's flags.toml (issue 22, Checks; Deliver 4).

A script no extract covers is listed in UNCHECKED (so a newly unchecked one fails here), and a plan
calling a script the release's tree does not have fails."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.steps import plan_steps
from tests.fixtures_planning import fixture_names
from tests.paths import STANDINS_DIR

sys.path.insert(0, str(STANDINS_DIR))

from vendor_argparse import check, check_flags, missing_reason, script_flags

PROFILES = sorted(p.name for p in load_profiles())
# (plan fields) per fixture: a default build, SmoothQuant and INT8 weight-only (the converter routes),
# and a parallel one.
VARIANTS: list[dict[str, Any]] = [{"tp": "1"}, {"tp": "2", "quantize": "smoothquant"},
                                  {"tp": "1", "quantize": "int8_wo"}, {"tp": "2", "pp": 2}]
# (release, script) no extract covers: the stand-in runs them unchecked. Shrink this as sources are read.
UNCHECKED = {("0.21.0rc1", "examples/models/contrib/falcon/convert_checkpoint.py"),
             ("1.0.0", "examples/models/contrib/falcon/convert_checkpoint.py")}


def _vendor_argv(profile: str, plan_model: Any) -> tuple[list[tuple[str, list[str]]], set[tuple[str, int]]]:
    """(script or tool, argv) of every vendor command of every valid plan; and which (fixture, variant) were valid."""
    commands: list[tuple[str, list[str]]] = []
    valid: set[tuple[str, int]] = set()
    for model in fixture_names():
        for variant, fields in enumerate(VARIANTS):
            plan = plan_model("trtllm", model, profile=profile, trust_remote_code=True, **fields)
            if not plan.valid:
                continue
            valid.add((model, variant))
            for step in plan_steps(plan, get_profile(profile)).steps:
                argv = [token.replace("{workers}", "1") for token in step.argv]
                if argv[0] == "trtllm-build":
                    commands.append(("trtllm-build", argv[1:]))
                elif len(argv) > 1 and argv[1].startswith("{examples}/"):
                    commands.append(("examples/" + argv[1].removeprefix("{examples}/"), argv[2:]))
    return commands, valid


@pytest.mark.parametrize("profile", PROFILES)
def test_every_generated_vendor_command_is_one_its_argparse_accepts(profile: str, plan_model: Any) -> None:
    version = get_profile(profile).tensorrt_llm
    commands, valid = _vendor_argv(profile, plan_model)
    assert valid and commands, f"{profile}: no valid plan to check"
    # The Llama family plans on every profile; a planner that refused everything would pass the loop.
    assert {("meta-llama--Llama-2-7b-hf", 0), ("mistralai--Mistral-7B-v0.1", 0)} <= valid, sorted(valid)
    refused: list[str] = []
    unchecked: set[tuple[str, str]] = set()
    for script, argv in commands:
        if script == "trtllm-build":
            if missing_reason(version) is None:
                problem = check(version, argv)
                if problem:
                    refused.append(f"{problem}\n    trtllm-build {' '.join(argv)}")
            continue
        try:
            flags, _source = script_flags(version, script)
        except FileNotFoundError as error:
            refused.append(str(error))
            continue
        if flags is None:
            unchecked.add((version, script))
            continue
        problem = check_flags(flags, argv, Path(script).name)
        if problem:
            refused.append(f"{problem}\n    {script} {' '.join(argv)}")
    assert not refused, f"{profile}: TensorRT-LLM {version}'s argparse refuses:\n" + "\n".join(sorted(set(refused)))
    assert unchecked <= UNCHECKED, f"newly unchecked (read the source or list it): {unchecked - UNCHECKED}"
