"""The TensorRT-LLM artifact layouts the LMI containers load without compiling.

``trtllm-toolkit`` (LMI 0.25-0.30, DJL's tensorrt_llm_toolkit): the container recognises a
sub-directory holding both ``config.pbtxt`` and ``tokenizer_config.json``::

    serving.properties
    tensorrt_llm/config.pbtxt          Triton tensorrtllm_backend config; gpt_model_path is absolute
    tensorrt_llm/1/config.json         engine config (build_config / builder_config)
    tensorrt_llm/1/rank<i>.engine      (0.7.x: <model>_<dtype>_tp<N>_rank<i>.engine)
    tensorrt_llm/config.json           the Hugging Face config
    tensorrt_llm/tokenizer*, special_tokens_map.json, generation_config.json, ...

``trtllm-flat`` (LLM API, TensorRT-LLM >= 0.21 / 1.x): one directory; its ``config.json`` is the
engine config with ``build_config`` (DJL's ``isValidTrtLlmModelRepo`` looks for it), so the Hugging
Face config.json must never overwrite it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.packager import carry_source_files, trust_remote_code
from lmi_build.core.errors import LmiBuildError, StepError
from lmi_build.core.fs import link_or_copy
from lmi_build.core.reading import BadFile, read_json_file, read_regular_text
from lmi_build.core.types import PlanMessage
from lmi_build.options.properties import read_properties
from lmi_build.planning.context import written_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.trtllm.engine_check import RANK_FILE, world_size_of
from lmi_build.targets.trtllm.engine_match import engine_mismatches, expectation_from_properties
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from lmi_build.targets.trtllm.options import TrtllmOptions
from lmi_build.targets.trtllm.triton import config_pbtxt

# The flat (LLM API) layout is served by ONE Python process whose LLM(...) starts its own MPI ranks.
# engine=MPI would be engine=Python + option.mpi_mode=true: every rank would construct LLM(...) with
# tp=N, which fails at tp > 1. DJL 0.33 sets mpi_mode only for rolling_batch=trtllm
# (djl-serving wlm LmiConfigRecommender.java setMpiMode, :85 at 0.33.0-dlc; rolling_batch=auto with the
# trtllm feature becomes disable + async_mode=true), and its trtllm async-service test configs set no MPI
# engine (tests/integration/llm/prepare.py build_trtllm_handler_model); docs/VENDOR-FACTS.md.
FLAT_ENGINE = "Python"
BUILD_LOGS = "build-logs"
TOOLKIT_DIR = "tensorrt_llm"
ENGINE_SUBDIR = "1"
DEFAULT_CONTAINER_MODEL_DIR = "/opt/ml/model"  # where SageMaker and the LMI docs mount the model
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def _build(plan: BuildPlan) -> TrtllmBuild:
    return plan.knobs(TrtllmBuild)


def _engine_files(produced: Path) -> list[Path]:
    files = [p for p in sorted(produced.iterdir()) if p.is_file() and RANK_FILE.match(p.name)]
    if not (produced / "config.json").is_file() or not files:
        raise StepError(f"{produced} is not an engine directory (config.json and rank*.engine expected)",
                        hint="run the engine build first")
    return files


def toolkit_properties(build: TrtllmBuild) -> dict[str, str]:
    """The serving.properties keys the toolkit layout writes (the start-up model reads them at plan time too)."""
    return written_text(TrtllmOptions(engine="MPI", rolling_batch="trtllm", tensor_parallel_degree=build.tp,
                                      pipeline_parallel_degree=build.pp if build.pp > 1 else None))


def flat_properties(build: TrtllmBuild) -> dict[str, str]:
    """The serving.properties keys the flat layout writes; with pp, pipeline_parallel_size too: what the 1.x
    service passes to LLM() (djl-serving 0.33.0-dlc trt_properties.py:42,138)."""
    pp = build.pp if build.pp > 1 else None
    return written_text(TrtllmOptions(engine=FLAT_ENGINE, entry_point="djl_python.lmi_trtllm.trtllm_async_service",
                                      async_mode=True, rolling_batch="disable", tensor_parallel_degree=build.tp,
                                      pipeline_parallel_degree=pp, pipeline_parallel_size=pp))


def read_pbtxt_parameter(text: str, key: str) -> str | None:
    match = re.search(r'key:\s*"' + re.escape(key) + r'"\s*value:\s*\{\s*string_value:\s*"([^"]*)"', text)
    return match.group(1) if match else None


def _check_engine_dir(engine_dir: Path, where: str, legacy_ok: bool) -> list[PlanMessage]:
    problems: list[PlanMessage] = []
    config_path = engine_dir / "config.json"
    try:
        config = read_json_file(config_path, what="engine config")
    except (OSError, ValueError):
        return [PlanMessage(code="engine_config", message=f"{where}config.json is missing or unreadable",
                            hint="rebuild the artifact")]
    if not isinstance(config, dict) or not ("build_config" in config or (legacy_ok and "builder_config" in config)):
        return [PlanMessage(code="engine_config", message=f"{where}config.json has no build_config",
                            hint="the Hugging Face config.json may have overwritten the engine config; rebuild")]
    world = world_size_of(config)
    ranks = sorted(int(m.group(1)) for p in engine_dir.iterdir() if (m := RANK_FILE.match(p.name)))
    if ranks != list(range(world)):
        problems.append(PlanMessage(code="engine_ranks",
                                    message=f"{where}: {len(ranks)} rank engine file(s) for world size {world}",
                                    hint="rebuild the artifact; an upload may have been cut short"))
    return problems


def _check_engine_properties(artifact_dir: Path, engine_dir: Path) -> list[PlanMessage]:
    """verify: the engine is what the artifact's serving.properties says (engine_match)."""
    properties_file, config_file = artifact_dir / "serving.properties", engine_dir / "config.json"
    if not properties_file.is_file() or not config_file.is_file():
        return []  # reported by the other checks
    try:
        config = read_json_file(config_file, what="engine config")
        expected = expectation_from_properties(read_properties(properties_file))
    except (OSError, ValueError, LmiBuildError):
        return []  # unreadable: reported by the engine config and properties checks
    if not isinstance(config, dict):
        return []
    return [PlanMessage(code="engine_properties", message=f"engine and serving.properties disagree: {problem}",
                        hint="rebuild the artifact, or fix serving.properties to match the engine")
            for problem in engine_mismatches(config, expected)]


def _check_tokenizer(directory: Path, where: str) -> list[PlanMessage]:
    if any((directory / name).is_file() for name in TOKENIZER_FILES):
        return []
    return [PlanMessage(code="tokenizer_missing", message=f"no tokenizer files in {where or 'the artifact'}",
                        hint="rebuild from a source model that has its tokenizer")]


def _carry_build_logs(produced: Path, staging: Path) -> None:
    """The vendor tools' logs (``build-logs/`` beside the engines) travel with the artifact, at its root."""
    logs = produced / BUILD_LOGS
    if logs.is_dir():
        for log in sorted(logs.glob("*.log")):
            link_or_copy(log, staging / BUILD_LOGS / log.name)


class ToolkitLayout:
    name = "trtllm-toolkit"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        engines = _engine_files(produced)
        repo = staging / TOOLKIT_DIR
        for path in [produced / "config.json", *engines]:
            link_or_copy(path, repo / ENGINE_SUBDIR / path.name)
        hf_config = source_dir / "config.json"
        if hf_config.is_file():
            link_or_copy(hf_config, repo / "config.json")  # beside the engines' own config, never over it
        carry_source_files(source_dir, repo, trust_remote_code=trust_remote_code(plan))
        _carry_build_logs(produced, staging)
        gpt_model_path = str(PurePosixPath(DEFAULT_CONTAINER_MODEL_DIR) / TOOLKIT_DIR / ENGINE_SUBDIR)
        backend = plan.toolchain.versions.get("tensorrt_llm", "")  # tensorrtllm_backend is released with it
        (repo / "config.pbtxt").write_text(config_pbtxt(plan, gpt_model_path, backend), encoding="utf-8")

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return toolkit_properties(_build(plan))

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        repo = artifact_dir / TOOLKIT_DIR
        if not repo.is_dir():
            return [PlanMessage(code="layout", message=f"no {TOOLKIT_DIR}/ directory",
                                hint="point the container one level above tensorrt_llm/")]
        problems = _check_engine_dir(repo / ENGINE_SUBDIR, f"{TOOLKIT_DIR}/{ENGINE_SUBDIR}/", legacy_ok=True)
        problems += _check_engine_properties(artifact_dir, repo / ENGINE_SUBDIR)
        problems += _check_tokenizer(repo, f"{TOOLKIT_DIR}/")
        if not (repo / "tokenizer_config.json").is_file():
            problems.append(PlanMessage(code="tokenizer_config",
                                        message=f"{TOOLKIT_DIR}/tokenizer_config.json is missing (the toolkit "
                                        "detects a prebuilt repo by config.pbtxt + tokenizer_config.json)",
                                        hint="rebuild from a source model with tokenizer_config.json"))
        pbtxt = repo / "config.pbtxt"
        if not pbtxt.is_file():
            problems.append(PlanMessage(code="pbtxt", message=f"{TOOLKIT_DIR}/config.pbtxt is missing",
                                        hint="rebuild the artifact"))
        else:
            path = read_pbtxt_parameter(_read_pbtxt(pbtxt), "gpt_model_path")
            expected_tail = f"/{TOOLKIT_DIR}/{ENGINE_SUBDIR}"
            if not path or not path.startswith("/") or not path.rstrip("/").endswith(expected_tail):
                problems.append(PlanMessage(code="pbtxt_path",
                                            message=f"config.pbtxt gpt_model_path '{path}' does not end in {expected_tail}",
                                            hint="rebuild with the right --container-model-dir"))
        return problems


class FlatLayout:
    name = "trtllm-flat"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        for path in [produced / "config.json", *_engine_files(produced)]:
            link_or_copy(path, staging / path.name)
        # carry_source_files never carries config.json: the engine config stays the only one.
        carry_source_files(source_dir, staging, trust_remote_code=trust_remote_code(plan))
        _carry_build_logs(produced, staging)

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return flat_properties(_build(plan))

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        return (_check_engine_dir(artifact_dir, "", legacy_ok=False) + _check_engine_properties(artifact_dir, artifact_dir)
                + _check_tokenizer(artifact_dir, ""))


def _read_pbtxt(path: Path) -> str:
    """config.pbtxt, bounded (an unreadable one names no gpt_model_path, which is reported)."""
    try:
        return read_regular_text(path, what="config.pbtxt")
    except (BadFile, UnicodeDecodeError):
        return ""


TOOLKIT = ToolkitLayout()
FLAT = FlatLayout()
# The layouts this target packages, by name (``Target.layouts()``).
LAYOUTS: dict[str, Layout] = {TOOLKIT.name: TOOLKIT, FLAT.name: FLAT}


def layout_for(profile_layout: str) -> Layout:
    """The layout of a profile's ``layout`` field (toolkit: 0.26-0.30, flat: 0.33+)."""
    if profile_layout == "toolkit":
        return TOOLKIT
    return FLAT
