"""Runners and engine checks, driven through the trtllm-build STAND-IN (tests/standins): success,
tool failure, timeout, wrong rank count; docker argv; toolchain detection."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.core.errors import StepError
from lmi_build.reporting.output import Mode, set_mode
from lmi_build.runners import LocalRunner, Paths, docker_argv, make_runner, run_steps
from lmi_build.targets.trtllm.engine_check import check_engine_dir, gpu_sm
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import Step, plan_steps, trtllm_paths
from lmi_build.targets.trtllm.toolchain import toolchain_available
from tests.fixtures_trtllm import TrtllmPlanner, write_checkpoint

PROFILE = "lmi-0.30.0-trtllm-0.12.0"


@pytest.fixture(autouse=True)
def _fresh_output() -> None:
    # The process-wide Output binds sys.stderr lazily; a new one binds this test's captured stream.
    set_mode(Mode.HUMAN)


def _engine_step(trtllm_plan: TrtllmPlanner, profile: str, **fields: object) -> tuple[object, Step]:
    plan = trtllm_plan(profile, **fields)
    steps = plan_steps(plan, get_profile(profile)).steps
    return plan, steps[-1]


def _paths(tmp_path: Path, tp: int) -> Paths:
    model = tmp_path / "model"
    model.mkdir()
    return trtllm_paths(model=model, checkpoint=write_checkpoint(tmp_path / "ckpt", tp=tp), engine=tmp_path / "engine")


@pytest.mark.parametrize("profile", ["lmi-0.27.0-trtllm-0.8.0", "lmi-0.29.0-trtllm-0.11.0", PROFILE,
                                     "lmi-0.33.0-trtllm-0.21.0"])
def test_standin_build_succeeds_and_is_marked(profile: str, trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                              standin_path: Callable[..., None],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    version = get_profile(profile).tensorrt_llm
    standin_path(version)
    plan, step = _engine_step(trtllm_plan, profile, tp="2")
    paths = _paths(tmp_path, tp=2)
    results = run_steps([step], LocalRunner(gpus=1), tmp_path / "work", paths, plan)  # type: ignore[arg-type]
    assert results[0].name == "engine" and results[0].log is not None
    log = results[0].log.read_text()
    assert "STAND-IN" in log and "--workers 1" in log  # one GPU: ranks built one after the other
    info = check_engine_dir(paths.engine, get_profile(profile), world_size=2)
    assert info.stand_in and info.rank_files == ("rank0.engine", "rank1.engine") and info.version == version
    assert "[engine]" in capsys.readouterr().err  # streamed live with the step prefix


def test_tool_failure_shows_tail_and_removes_outputs(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                                     standin_path: Callable[..., None]) -> None:
    standin_path(get_profile(PROFILE).tensorrt_llm, "fail")
    plan, step = _engine_step(trtllm_plan, PROFILE)
    paths = _paths(tmp_path, tp=1)
    with pytest.raises(StepError) as error:
        run_steps([step], LocalRunner(gpus=1), tmp_path / "work", paths, plan)  # type: ignore[arg-type]
    message = error.value.one_line()
    assert "exit 1" in message and "simulated failure: out of memory" in message and "\n" not in message
    assert not paths.engine.exists()
    assert (tmp_path / "work" / "build-logs" / "engine.log").is_file()


def test_flags_of_another_version_are_refused_by_the_tool(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                                          standin_path: Callable[..., None]) -> None:
    standin_path("0.12.0")  # the 0.8 argv has --max_output_len and --use_custom_all_reduce
    plan, step = _engine_step(trtllm_plan, "lmi-0.27.0-trtllm-0.8.0")
    with pytest.raises(StepError, match="exit 2"):
        run_steps([step], LocalRunner(gpus=1), tmp_path / "work", _paths(tmp_path, 1), plan)  # type: ignore[arg-type]


def test_timeout_kills_the_process_group(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                         standin_path: Callable[..., None]) -> None:
    standin_path(get_profile(PROFILE).tensorrt_llm, "hang")
    plan, step = _engine_step(trtllm_plan, PROFILE)
    paths = _paths(tmp_path, tp=1)
    with pytest.raises(StepError, match="timed out after 2s"):
        run_steps([step.model_copy(update={"timeout_s": 2})], LocalRunner(gpus=1), tmp_path / "work", paths,
                  plan)  # type: ignore[arg-type]
    assert not paths.engine.exists()


def test_wrong_rank_count_is_refused(trtllm_plan: TrtllmPlanner, tmp_path: Path,
                                     standin_path: Callable[..., None]) -> None:
    standin_path(get_profile(PROFILE).tensorrt_llm, "missing_rank")
    plan, step = _engine_step(trtllm_plan, PROFILE, tp="2")
    paths = _paths(tmp_path, tp=2)
    run_steps([step], LocalRunner(gpus=2), tmp_path / "work", paths, plan)  # type: ignore[arg-type]
    with pytest.raises(StepError, match="expected 2 engine file"):
        check_engine_dir(paths.engine, get_profile(PROFILE), world_size=2)


def test_version_mismatch_is_refused(tmp_path: Path) -> None:
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "config.json").write_text(json.dumps({"version": "0.11.0", "build_config": {},
                                                    "pretrained_config": {"mapping": {"world_size": 1}}}))
    (engine / "rank0.engine").write_bytes(b"x")
    with pytest.raises(StepError, match=r"expects 0\.12\.0"):
        check_engine_dir(engine, get_profile(PROFILE), world_size=1)


def test_output_dir_not_empty_is_refused(trtllm_plan: TrtllmPlanner, tmp_path: Path) -> None:
    plan, step = _engine_step(trtllm_plan, PROFILE)
    paths = _paths(tmp_path, tp=1)
    paths.engine.mkdir()
    (paths.engine / "old").write_text("keep me")
    with pytest.raises(StepError, match="not empty"):
        run_steps([step], LocalRunner(gpus=1), tmp_path / "w", paths, plan)  # type: ignore[arg-type]
    assert (paths.engine / "old").read_text() == "keep me"


def test_docker_argv(trtllm_plan: TrtllmPlanner, tmp_path: Path) -> None:
    _, step = _engine_step(trtllm_plan, PROFILE, tp="2")
    argv = docker_argv(step, _paths(tmp_path, 2), get_profile(PROFILE).image, workers=2)
    assert argv[:9] == ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "--ulimit", "memlock=-1", "--user"]
    assert f"{(tmp_path / 'ckpt').resolve()}:/work/checkpoint:ro" in argv
    assert f"{(tmp_path / 'engine').resolve()}:/work/engine" in argv
    image_at = argv.index(get_profile(PROFILE).image)
    assert argv[image_at + 1] == "trtllm-build" and "/work/engine" in argv and argv[argv.index("--workers") + 1] == "2"


def test_toolchain_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    ok, why = toolchain_available("local", get_profile(PROFILE))
    assert not ok and "trtllm-build not found on PATH" in why and "no GPU (nvidia-smi missing)" in why
    ok, why = toolchain_available("docker", get_profile(PROFILE))
    assert not ok and "docker CLI not found" in why
    assert toolchain_available("script", get_profile(PROFILE))[0]
    assert make_runner("script", image=get_profile(PROFILE).image).kind == "script"


def test_gpu_sm_reads_compute_cap(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"  # prints what nvidia-smi prints for an H100
    fake.write_text("#!/bin/sh\necho '9.0, NVIDIA H100 80GB HBM3'\n")
    fake.chmod(0o755)
    assert gpu_sm(str(fake)) == ("sm90", "NVIDIA H100 80GB HBM3")
    if shutil.which("nvidia-smi") is None:
        assert gpu_sm() == (None, None)


def test_finish_command_names_plan_and_dirs(tmp_path: Path) -> None:
    # The saved plan carries the profile (and every knob): the command names the plan, not flags.
    from lmi_build.targets.trtllm.build import finish_command

    command = finish_command(tmp_path / "out" / "plan.json", checkpoint=tmp_path / "ck pt", runner="docker",
                             output=tmp_path / "out-artifact")
    assert f"--plan {tmp_path}/out/plan.json" in command and "--runner docker" in command
    assert "'" in command  # quoted path
    assert "--profile" not in command and "--tp" not in command
