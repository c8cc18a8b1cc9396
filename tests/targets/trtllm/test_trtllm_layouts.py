"""The TensorRT-LLM layouts, packaged by the real packager from a stand-in engine directory, then
checked the way `lmi-build verify` checks them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.manifest import BuildRecord
from lmi_build.artifact.packager import package
from lmi_build.reporting.output import Mode, set_mode
from lmi_build.runners import LocalRunner, Paths, run_steps
from lmi_build.targets import TARGETS
from lmi_build.targets.trtllm.layouts import LAYOUTS, layout_for, read_pbtxt_parameter
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.steps import plan_steps, trtllm_paths
from tests.fixtures_trtllm import TrtllmPlanner, write_checkpoint, write_model_dir


@pytest.fixture(autouse=True)
def _fresh_output() -> None:
    set_mode(Mode.HUMAN)


def _build(profile_name: str, trtllm_plan: TrtllmPlanner, tmp_path: Path, standin_path: Callable[..., None],
           tp: int = 2) -> tuple[object, Paths]:
    profile = get_profile(profile_name)
    standin_path(profile.tensorrt_llm)
    plan = trtllm_plan(profile_name, tp=str(tp))
    paths = trtllm_paths(model=write_model_dir(tmp_path / "model"), checkpoint=write_checkpoint(tmp_path / "ckpt", tp=tp),
                  engine=tmp_path / "engine")
    run_steps(plan_steps(plan, profile).steps[-1:], LocalRunner(gpus=1), tmp_path / "work", paths, plan)
    return plan, paths


def test_toolkit_layout(trtllm_plan: TrtllmPlanner, tmp_path: Path, standin_path: Callable[..., None]) -> None:
    name = "lmi-0.29.0-trtllm-0.11.0"
    plan, paths = _build(name, trtllm_plan, tmp_path, standin_path)
    out = package(plan, target=TARGETS["trtllm"], layout=layout_for(get_profile(name).layout), produced=paths.engine,  # type: ignore[arg-type]
                  source_dir=paths.model, output_dir=tmp_path / "artifact", record=BuildRecord())
    repo = out / "tensorrt_llm"
    assert sorted(p.name for p in (repo / "1").iterdir()) == ["config.json", "rank0.engine", "rank1.engine"]
    assert json.loads((repo / "1" / "config.json").read_text())["stand_in"] is True
    assert json.loads((repo / "config.json").read_text())["model_type"] == "llama"  # HF config beside, not over
    assert (repo / "tokenizer_config.json").is_file() and (repo / "special_tokens_map.json").is_file()
    pbtxt = (repo / "config.pbtxt").read_text()
    assert read_pbtxt_parameter(pbtxt, "gpt_model_path") == "/opt/ml/model/tensorrt_llm/1"
    assert read_pbtxt_parameter(pbtxt, "gpt_model_type") == "inflight_fused_batching"
    props = (out / "serving.properties").read_text()
    assert "engine=MPI" in props and "option.rolling_batch=trtllm" in props
    assert "option.tensor_parallel_degree=2" in props
    layout = LAYOUTS["trtllm-toolkit"]
    assert layout.check(out) == []
    (repo / "1" / "rank1.engine").unlink()
    assert [m.code for m in layout.check(out)] == ["engine_ranks"]


def test_toolkit_pbtxt_path_is_checked(tmp_path: Path) -> None:
    repo = tmp_path / "tensorrt_llm"
    (repo / "1").mkdir(parents=True)
    (repo / "1" / "config.json").write_text(json.dumps({"version": "0.11.0", "build_config": {},
                                                        "pretrained_config": {"mapping": {"world_size": 1}}}))
    (repo / "1" / "rank0.engine").write_bytes(b"x")
    (repo / "tokenizer_config.json").write_text("{}")
    (repo / "config.pbtxt").write_text('parameters: {\n  key: "gpt_model_path"\n  value: {\n    string_value: "engines"\n  }\n}\n')
    assert [m.code for m in LAYOUTS["trtllm-toolkit"].check(tmp_path)] == ["pbtxt_path"]


def test_flat_layout(trtllm_plan: TrtllmPlanner, tmp_path: Path, standin_path: Callable[..., None]) -> None:
    name = "lmi-0.33.0-trtllm-0.21.0"
    plan, paths = _build(name, trtllm_plan, tmp_path, standin_path)
    out = package(plan, target=TARGETS["trtllm"], layout=layout_for(get_profile(name).layout), produced=paths.engine,  # type: ignore[arg-type]
                  source_dir=paths.model, output_dir=tmp_path / "artifact", record=BuildRecord())
    config = json.loads((out / "config.json").read_text())
    assert "build_config" in config and "model_type" not in config  # the HF config never overwrote it
    for carried in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                    "chat_template.jinja", "rank0.engine", "rank1.engine"):
        assert (out / carried).is_file(), carried
    props = (out / "serving.properties").read_text()
    for line in ("option.entryPoint=djl_python.lmi_trtllm.trtllm_async_service", "option.async_mode=true",
                 "option.rolling_batch=disable"):
        assert line in props
    assert "engine=Python" in props and "engine=MPI" not in props and "option.mpi_mode" not in props
    layout = LAYOUTS["trtllm-flat"]
    assert layout.check(out) == []
    (out / "tokenizer.json").unlink()
    (out / "tokenizer_config.json").unlink()
    assert [m.code for m in layout.check(out)] == ["tokenizer_missing"]


def test_flat_check_refuses_hf_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "rank0.engine").write_bytes(b"x")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert [m.code for m in LAYOUTS["trtllm-flat"].check(tmp_path)] == ["engine_config"]
