"""Step generation: golden argv per profile x variant. Whether every fixture x profile uses only flags
its TensorRT-LLM version has is checked against the vendor's own argparse, not lmi-build's flag table
(which ``plan_steps`` enforces itself): test_trtllm_argv_vs_vendor.py. LMI_BUILD_UPDATE_GOLDEN=1
rewrites goldens for review (tests/golden.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import UnsupportedTarget
from lmi_build.runners import ScriptRunner, run_steps
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.steps import engine_script, plan_steps, trtllm_paths
from tests.fixtures_trtllm import TrtllmPlanner
from tests.golden import check_golden

PROFILES = [p.name for p in load_profiles()]
VARIANTS: dict[str, dict[str, Any]] = {
    "fp16_tp1": {},
    "fp16_tp2_knobs": {"tp": "2", "option": ("use_custom_all_reduce=true",
                                             "use_fused_mlp=true", "enable_kv_cache_reuse=true",
                                             "max_num_tokens=8192")},
    "smoothquant_tp1": {"quantize": "smoothquant"},
    "smoothquant_per_token_tp1": {"quantize": "smoothquant", "option": ("smoothquant_per_token=true",
                                                                        "smoothquant_per_channel=true")},
    "awq_tp1": {"quantize": "awq"},
}


def _vendor_route(plan: Any) -> Any:
    # The per-token SmoothQuant the LMI container ran (W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN) comes only
    # from convert_checkpoint.py; the planner picks the ModelOpt route for llama, so switch it here.
    quantization = plan.quantization.model_copy(update={"quant_algo": "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"})
    return plan.model_copy(update={"build": plan.build.model_copy(update={"checkpoint_route": "vendor"}),
                                   "quantization": quantization})


def _variant_plan(trtllm_plan: TrtllmPlanner, profile_name: str, variant: str) -> Any:
    plan = trtllm_plan(profile_name, **VARIANTS[variant])
    return _vendor_route(plan) if variant == "smoothquant_per_token_tp1" else plan


def _golden(name: str, data: str) -> None:
    check_golden(f"trtllm/{name}", data)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_golden_steps(profile_name: str, trtllm_plan: TrtllmPlanner) -> None:
    profile = get_profile(profile_name)
    result: dict[str, Any] = {}
    for variant in VARIANTS:
        plan = _variant_plan(trtllm_plan, profile_name, variant)
        try:
            steps = plan_steps(plan, profile)
        except UnsupportedTarget as error:
            result[variant] = {"refused": error.one_line()}
            continue
        result[variant] = {"warnings": steps.warnings, "flag_series": steps.flag_series,
                           "steps": [{"name": s.name, "where": s.where, "argv": s.argv} for s in steps.steps]}
    _golden(f"{profile_name}.json", json.dumps(result, indent=2) + "\n")


@pytest.mark.parametrize("profile_name", ["lmi-0.26.0-trtllm-0.7.1", "lmi-0.29.0-trtllm-0.11.0",
                                          "lmi-0.33.0-trtllm-0.21.0"])
def test_golden_script(profile_name: str, trtllm_plan: TrtllmPlanner, tmp_path: Path) -> None:
    profile = get_profile(profile_name)
    plan = _variant_plan(trtllm_plan, profile_name, "smoothquant_per_token_tp1")
    runner = ScriptRunner(image=profile.image)
    paths = trtllm_paths(model=Path("/models/llama"), checkpoint=Path("/work/ckpt"), engine=Path("/work/engine"),
                  examples=Path("/src/TensorRT-LLM/examples"))
    run_steps(plan_steps(plan, profile).steps, runner, tmp_path, paths, plan)
    text = engine_script(runner, paths, header=f"profile {profile.name}", tensorrt_llm=profile.tensorrt_llm)
    _golden(f"{profile_name}__smoothquant_per_token.sh", text)
    script = tmp_path / "build.sh"
    script.write_text(text)
    subprocess.run(["sh", "-n", str(script)], check=True)  # POSIX syntax


def _with_multi_block(plan: Any) -> Any:
    # The llama recipe refuses option.multi_block_mode (planner), so set the knob on the plan itself.
    build = plan.build.model_copy(update={"multi_block_mode": True, "use_custom_all_reduce": True})
    sources = {**plan.option_sources, "option.multi_block_mode": "cli", "option.use_custom_all_reduce": "cli"}
    return plan.model_copy(update={"build": build, "option_sources": sources})


def test_removed_flags_become_warnings(trtllm_plan: TrtllmPlanner) -> None:
    name = "lmi-0.30.0-trtllm-0.12.0"
    result = plan_steps(_with_multi_block(trtllm_plan(name, **VARIANTS["fp16_tp2_knobs"])), get_profile(name))
    engine = result.steps[-1].argv
    assert "--use_custom_all_reduce" not in engine and "--multi_block_mode" not in engine
    assert "--max_output_len" not in engine and "--max_seq_len" in engine
    assert any("runtime matter since 0.12" in w for w in result.warnings)
    assert any("runtime option since 0.12" in w for w in result.warnings)
    old = plan_steps(_with_multi_block(trtllm_plan("lmi-0.27.0-trtllm-0.8.0", **VARIANTS["fp16_tp2_knobs"])),
                     get_profile("lmi-0.27.0-trtllm-0.8.0"))
    argv = old.steps[-1].argv
    assert argv[argv.index("--use_custom_all_reduce") + 1] == "enable" and "--max_output_len" in argv
    assert argv[argv.index("--multi_block_mode") + 1] == "enable" and not old.warnings


