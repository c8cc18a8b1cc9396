"""Issue 31 items 1-2: what an hf profile's DJL handler refuses at start-up (``targets/hf/startup.py``),
read by executing the release's properties manager (``tests/vendor/djl/verdicts.json``). vLLM 0.35/0.36
raise on option.pipeline_parallel_degree != 1 and on any vLLM spelling (max_num_seqs,
tensor_parallel_size, pipeline_parallel_size) of their own keys; LMI-Dist 11 (0.29) takes pipeline
parallelism. ``plan`` and ``verify --for-container`` give the same verdict; ``lmi-build hf`` takes
``--pp`` as ``plan hf`` does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.verify import serving_target, verify_local
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.hf.options import HfOptions
from lmi_build.targets.hf.profiles import load_profiles
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import HF, HF_LAYOUT, make_plan
from tests.fixtures_planning import Planner, codes

VLLM_0_11 = "lmi-0.35.0-vllm-0.11.1"
VLLM_0_17 = "lmi-0.36.0-vllm-0.17.0"
LMI_DIST = "lmi-0.29.0-lmi-dist-11.0.0"
LLAMA = "meta-llama--Llama-2-7b-hf"


@pytest.mark.parametrize("profile", [VLLM_0_11, VLLM_0_17])
def test_pipeline_parallel_refused_on_vllm_profiles(profile: str, plan_model: Planner) -> None:
    by_flag = plan_model("hf", LLAMA, profile=profile, pp=2)
    by_option = plan_model("hf", LLAMA, profile=profile, option=("option.pipeline_parallel_degree=2",))
    for plan in (by_flag, by_option):
        assert "hf_pipeline_parallel" in codes(plan), [e.message for e in plan.errors]
        message = next(e.message for e in plan.errors if e.code == "hf_pipeline_parallel")
        assert "Pipeline parallelism is not supported" in message and "vllm_rb_properties.py" in message


def test_pipeline_parallel_taken_by_lmi_dist(plan_model: Planner) -> None:
    plan = plan_model("hf", LLAMA, profile=LMI_DIST, pp=2)
    assert "hf_pipeline_parallel" not in codes(plan)
    assert plan.options["option.pipeline_parallel_degree"] == "2"


@pytest.mark.parametrize("profile", ["lmi-0.26.0-lmi-dist-8.0.0", "lmi-0.27.0-lmi-dist-9.0.0",
                                     "lmi-0.28.0-lmi-dist-10.0.0"])
def test_pipeline_parallel_ignored_by_lmi_dist_before_0_29(profile: str, plan_model: Planner) -> None:
    # 0.26-0.28's LmiDistRbProperties has no pipeline_parallel_degree (pydantic drops the key unread) and
    # builds LMI-Dist's engine (0.26 get_model, 0.27-0.28 VllmEngineArgs) without pipeline parallelism
    # (tests/vendor/djl/lmi_dist_releases.json)
    plan = plan_model("hf", LLAMA, profile=profile, pp=2)
    message = next(e.message for e in plan.errors if e.code == "hf_pipeline_parallel")
    assert "ignores option.pipeline_parallel_degree=2" in message and "lmi_dist_rb_properties.py" in message
    assert "Pipeline parallelism is not supported" not in message


START_KEYS = {p.name: p for p in load_profiles() if p.start_rolling_batch or p.start_mpi_mode}


def test_the_profiles_whose_image_picks_another_engine_say_so() -> None:
    # 0.26 has no rolling batch unless one is written (Python default disable) and sets mpi_mode only with engine
    # DeepSpeed or MPI; 0.27-0.28 pick lmi-dist only for the model types of a map; 0.32 picks lmi-dist, not vllm;
    # 0.27 sets mpi_mode only with the engine it writes itself (each profile's start_sources)
    assert {n: (p.start_rolling_batch, p.start_mpi_mode) for n, p in START_KEYS.items()} == {
        "lmi-0.26.0-lmi-dist-8.0.0": ("lmi-dist", True), "lmi-0.27.0-lmi-dist-9.0.0": ("lmi-dist", True), "lmi-0.28.0-lmi-dist-10.0.0": ("lmi-dist", False),
        "lmi-0.32.0-vllm-0.7.3": ("vllm", False)}


@pytest.mark.parametrize("profile", sorted(START_KEYS))
def test_the_plan_writes_the_keys_its_image_starts_the_engine_with(profile: str, plan_model: Planner) -> None:
    found = START_KEYS[profile]
    plan = plan_model("hf", LLAMA, profile=profile)
    assert plan.options["option.rolling_batch"] == found.start_rolling_batch
    assert plan.options.get("option.mpi_mode") == ("true" if found.start_mpi_mode else None)
    # the user's own choice is kept (and checked at start-up as given)
    given = plan_model("hf", LLAMA, profile=profile, option=("option.rolling_batch=disable",))
    assert given.options["option.rolling_batch"] == "disable"
    assert "option.rolling_batch" not in plan_model("hf", LLAMA, profile=VLLM_0_17).options


@pytest.mark.parametrize(("option", "lmi_key"), [("option.max_num_seqs=64", "option.max_rolling_batch_size"),
                                                 ("option.tensor_parallel_size=1", "option.tensor_parallel_degree"),
                                                 ("option.pipeline_parallel_size=1", "option.pipeline_parallel_degree")])
def test_vllm_spellings_of_djl_keys_refused(option: str, lmi_key: str, plan_model: Planner) -> None:
    # Even a value equal to DJL's own: DJL compares the raw string with its parsed int.
    plan = plan_model("hf", LLAMA, profile=VLLM_0_11, option=(option,))
    assert "hf_engine_arg_conflict" in codes(plan), [e.message for e in plan.errors]
    error = next(e for e in plan.errors if e.code == "hf_engine_arg_conflict")
    assert error.hint is not None and error.hint.startswith(f"write {lmi_key}=")
    assert "hf_engine_arg_conflict" not in codes(plan_model("hf", LLAMA, profile=LMI_DIST, option=(option,)))


def test_every_vllm_spelling_a_profile_names_is_read_as_text() -> None:
    # startup.py reads each through HfOptions (the one mapping); a spelling it lacks would raise at plan time.
    for profile in load_profiles():
        assert set(profile.engine_arg_conflicts) <= set(HfOptions.model_fields), profile.name


def test_verify_for_container_refuses_what_the_plan_refuses(make_artifact: Callable[..., Path],
                                                            source_model: Path) -> None:
    options = {**make_plan("hf").options, "option.pipeline_parallel_degree": "2", "option.max_num_seqs": "64"}
    plan = make_plan("hf", build=HfBuild(tp=1, dtype="float16"), options=options)
    artifact = make_artifact(plan, HF, HF_LAYOUT, source_model, source_model)
    for container, expected in ((VLLM_0_11, {"hf_pipeline_parallel", "hf_engine_arg_conflict"}),
                                (VLLM_0_17, {"hf_pipeline_parallel", "hf_engine_arg_conflict"}), (LMI_DIST, set())):
        report = verify_local(artifact, TARGETS, serving=serving_target(TARGETS, container=container))
        assert {e.code for e in report.errors} == expected, (container, report.errors)


def test_hf_build_takes_pp_as_plan_does(tmp_path: Path) -> None:
    result = run_lmi_build("hf", "--model", "demo:tiny-llama", "--pp", "2", "--profile", VLLM_0_11,
                                      "--output", str(tmp_path / "o"))
    assert "No such option" not in (result.stdout + result.stderr)
    assert result.returncode != 0 and "hf_pipeline_parallel" in (result.stdout + result.stderr), (result.stdout + result.stderr)


@pytest.mark.parametrize("profile", sorted(p.name for p in load_profiles()))
def test_lmi_dist_rolling_batch_refused_from_0_33(profile: str, plan_model: Planner) -> None:
    """LMI 0.33.0 removed LMI-Dist (breaking_changes.md): option.rolling_batch=lmi-dist on a 0.33+ profile says so."""
    plan = plan_model("hf", LLAMA, profile=profile, option=("option.rolling_batch=lmi-dist",))
    release = tuple(int(part) for part in PROFILE_VERSIONS[profile].split("."))
    removed = "hf_lmi_dist_removed" in codes(plan)
    assert removed is (release >= (0, 33, 0))
    if removed:
        message = next(e.message for e in plan.errors if e.code == "hf_lmi_dist_removed")
        assert "breaking_changes.md:7" in message and "0.33.0" in message


def test_vllm_rolling_batch_is_not_refused(plan_model: Planner) -> None:
    assert "hf_lmi_dist_removed" not in codes(plan_model("hf", LLAMA, profile=VLLM_0_17,
                                                         option=("option.rolling_batch=vllm",)))


PROFILE_VERSIONS = {p.name: p.lmi_version for p in load_profiles()}
