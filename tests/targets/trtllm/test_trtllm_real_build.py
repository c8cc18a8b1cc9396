"""The real TensorRT-LLM engine build of demo:tiny-llama: once with the host's own TensorRT-LLM, and
once per profile whose TensorRT-LLM the host has. Runs only where the real trtllm-build (not the
stand-in) and an NVIDIA GPU exist; skips with the reason elsewhere."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.trtllm.profiles import load_profiles
from tests.cli_process import run_lmi_build
from tests.paths import STANDINS_DIR

STANDINS = STANDINS_DIR.resolve()


def _why_not() -> str | None:
    found = shutil.which("trtllm-build")
    if found is None or Path(found).resolve().parent == STANDINS:
        return "trtllm-build not on PATH"
    if shutil.which("nvidia-smi") is None:
        return "no GPU (nvidia-smi missing)"
    return None


@pytest.mark.trtllm
@pytest.mark.gpu
@pytest.mark.slow
def test_real_engine_build_of_tiny_llama(tmp_path: Path, plan_model: Callable[..., BuildPlan]) -> None:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    import tensorrt_llm

    from lmi_build.runners import LocalRunner, run_steps
    from lmi_build.sources.demo import ensure_demo_model
    from lmi_build.targets.trtllm.checkpoint import build_trtllm_checkpoint
    from lmi_build.targets.trtllm.engine_check import check_engine_dir, gpu_sm
    from lmi_build.targets.trtllm.profiles import get_profile
    from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths

    # The host's own TensorRT-LLM decides which flags exist: a profile with its version.
    host = get_profile(None).model_copy(update={"name": "host", "tensorrt_llm": tensorrt_llm.__version__})
    model = ensure_demo_model("tiny-llama", with_weights=True)
    plan = plan_model("trtllm", model, tp="1", max_input_len=64, max_output_len=64, max_batch_size=4)
    paths = trtllm_paths(model=model, checkpoint=tmp_path / "ckpt", engine=tmp_path / "engine")
    build_trtllm_checkpoint(plan, model, paths.checkpoint)
    engine_steps = [s for s in plan_steps(plan, host).steps if s.name == "engine"]
    run_steps(engine_steps, LocalRunner(), tmp_path / "work", paths, plan)
    info = check_engine_dir(paths.engine, host, world_size=1)
    assert not info.stand_in
    assert gpu_sm()[0] is not None


def _host_trtllm_version() -> str | None:
    """The TensorRT-LLM version installed beside the real trtllm-build (None without one)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("tensorrt_llm")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.mark.trtllm
@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("profile", [p.name for p in load_profiles() if p.engine_capable])
def test_real_engine_build_per_profile(profile: str, tmp_path: Path) -> None:
    """One plan per profile, built for real through the CLI (local runner) where this host's
    TensorRT-LLM is the profile's; vendor example scripts come from $TRTLLM_EXAMPLES."""
    import json
    import os

    from lmi_build.targets.trtllm.profiles import get_profile

    reason = _why_not()
    if reason:
        pytest.skip(reason)
    wanted, host = get_profile(profile).tensorrt_llm, _host_trtllm_version()
    if host != wanted:
        pytest.skip(f"this host has TensorRT-LLM {host}, the profile {profile} needs {wanted}")
    examples = os.environ.get("TRTLLM_EXAMPLES")
    args = ["trtllm", "--model", "demo:tiny-llama", "--profile", profile, "--tp", "1", "--max-input-len", "64",
            "--max-output-len", "64", "--output", str(tmp_path / "artifact"), "--json"]
    if examples:
        args += ["--trtllm-examples", examples]
    result = run_lmi_build(*args, timeout=3600)
    if result.returncode != 0 and "needs the examples directory" in result.stderr:
        pytest.skip("set TRTLLM_EXAMPLES to a TensorRT-LLM checkout's examples/ at the profile's tag")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "artifact" and not outcome.get("stand_in")
