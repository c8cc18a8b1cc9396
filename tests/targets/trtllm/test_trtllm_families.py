"""A family's dtype and GPU limits per TensorRT-LLM release, as its example README states them (issue 31
item 6; data/families.toml): DeepSeek-V2's README lists BF16 only, warns that BF16 -> FP16 loses accuracy,
and runs its MLA kernel on SM90 only, so argparse accepting --dtype float16 or an A10G is not support."""

from __future__ import annotations

import re
from typing import Any

import pytest
import tomllib

from lmi_build.recipes.registry import load_recipes
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps
from tests.fixtures_planning import Planner, codes, warning_codes

DEEPSEEK_V2 = "deepseek-ai--DeepSeek-V2-Lite"
PROFILES = ["lmi-0.33.0-trtllm-0.21.0", "djl-nightly-trtllm-1.0.0"]


def _dtype_argv(plan: Any, profile: str) -> str:
    argv: list[str] = plan_steps(plan, get_profile(profile)).steps[0].argv
    return argv[argv.index("--dtype") + 1]


@pytest.mark.parametrize("profile", PROFILES)
def test_deepseek_v2_default_dtype_is_the_listed_bf16(profile: str, plan_model: Planner) -> None:
    plan = plan_model("trtllm", DEEPSEEK_V2, profile=profile, tp="2", gpu="h100")
    assert plan.valid, plan.errors
    assert _dtype_argv(plan, profile) == "bfloat16" and plan.options["option.dtype"] == "bf16"
    assert "family_dtype_default" in warning_codes(plan)


def test_deepseek_v2_fp16_set_by_the_user_is_refused(plan_model: Planner) -> None:
    plan = plan_model("trtllm", DEEPSEEK_V2, tp="2", gpu="h100", dtype="fp16")
    assert codes(plan) == {"family_dtype"}
    message = next(e for e in plan.errors if e.code == "family_dtype")
    assert "lists only bf16" in message.message and message.hint == "plan with --dtype bf16"
    assert plan_model("trtllm", DEEPSEEK_V2, tp="2", gpu="h100", dtype="bf16").valid


@pytest.mark.parametrize(("gpu", "instance"), [("a10g", None), ("a100", None), (None, "g5.12xlarge"),
                                               (None, "p4d.24xlarge")])
def test_deepseek_v2_refused_below_sm90(gpu: str | None, instance: str | None, plan_model: Planner) -> None:
    plan = plan_model("trtllm", DEEPSEEK_V2, tp="4", gpu=gpu, instance_type=instance)
    assert codes(plan) == {"gpu_family"}
    message = next(e for e in plan.errors if e.code == "gpu_family").message
    assert "MLA" in message and "needs sm90" in message


def test_deepseek_v2_on_hopper_or_unknown_gpu(plan_model: Planner) -> None:
    assert plan_model("trtllm", DEEPSEEK_V2, tp="8", instance_type="p5.48xlarge").valid
    unknown = plan_model("trtllm", DEEPSEEK_V2, tp="2")
    assert unknown.valid and "gpu_requirement" in warning_codes(unknown)


def test_families_data_is_cited_and_names_real_examples() -> None:
    from lmi_build.targets.trtllm.families import FAMILIES_FILE, family_limits

    examples = {support.trtllm_example for recipe in load_recipes().recipes
                for support in [recipe.targets.get("trtllm")] if support is not None}
    table = tomllib.loads(FAMILIES_FILE.read_text())
    assert table["families"], "no family limits recorded"
    for example, family in table["families"].items():
        assert example in examples, example
        for limits in family["releases"]:
            assert limits["sources"], example
            for source in limits["sources"]:
                # repository, a commit, a path and line numbers
                assert source.startswith("NVIDIA/TensorRT-LLM ") and re.search(r"\b[0-9a-f]{8}\b", source), source
                assert re.search(r":\d+", source), source
    limits = family_limits("deepseek_v2", "0.21.0rc1")
    assert limits is not None and limits.dtypes == ("bfloat16",) and limits.min_sm == 90
    assert family_limits("deepseek_v2", "0.12.0") is None and family_limits("llama", "0.21.0rc1") is None


def test_a_gpu_that_contradicts_the_instance_is_refused_naming_both(plan_model: Planner) -> None:
    """Issue 42 item 7: --gpu h100 with g5.xlarge (A10G) is one error naming both, and the instance's GPU decides
    what the artifact can run: an FP8 plan on an A10G instance is never valid."""
    llama = "meta-llama--Llama-3.1-8B-Instruct"
    plan = plan_model("trtllm", llama, gpu="h100", instance_type="g5.xlarge", quantize="fp8", max_output_len=1024)
    assert codes(plan) == {"gpu_instance", "gpu_quant"}
    message = next(e for e in plan.errors if e.code == "gpu_instance")
    assert message.message == ("--gpu h100 (sm90) contradicts --instance-type g5.xlarge, which has "
                               "NVIDIA A10G 24 GB (sm86)")
    assert "g5.xlarge" in next(e.message for e in plan.errors if e.code == "gpu_quant")
    # The same GPU named both ways (by name or SM) agrees.
    assert plan_model("trtllm", llama, gpu="sm86", instance_type="g5.xlarge", max_output_len=1024).valid
    assert plan_model("trtllm", llama, gpu="h100", instance_type="p5.48xlarge", quantize="fp8",
                      max_output_len=1024).valid
