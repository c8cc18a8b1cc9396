"""Checks of a built engine directory, and the GPU the engines are bound to.

A TensorRT engine only runs on the TensorRT version and the GPU SM architecture that built it, and
TensorRT does not refuse early with a clear message; so the build records both and refuses an engine
directory whose files do not match the plan (rank count, TensorRT-LLM version).
"""

import re
import shutil
import subprocess
from pathlib import Path

from lmi_build.core.errors import StepError
from lmi_build.core.reading import BadFile, read_json_file
from lmi_build.core.types import FrozenModel
from lmi_build.core.versions import release
from lmi_build.targets.trtllm.profiles import ContainerProfile

RANK_FILE = re.compile(r"^(?:.+_)?rank(\d+)\.engine$")


class EngineInfo(FrozenModel):
    version: str  # TensorRT-LLM version written into config.json
    world_size: int
    rank_files: tuple[str, ...]
    stand_in: bool = False  # the engines were written by a test stand-in, not TensorRT-LLM
    build_config: dict[str, object] = {}


def read_engine_config(engine_dir: Path) -> dict[str, object]:
    path = engine_dir / "config.json"
    if not path.exists():
        raise StepError(f"engine directory {engine_dir} has no config.json",
                        hint="the engine build did not finish; see build-logs/engine.log")
    try:
        data = read_json_file(path, what="engine config")  # bounded: depth, size, a FIFO in its place
    except BadFile as error:
        raise StepError(error.message, hint=error.hint) from None
    if not isinstance(data, dict):
        raise StepError(f"engine config {path} is not a JSON object")
    return data


def world_size_of(config: dict[str, object]) -> int:
    """World size from ``pretrained_config.mapping`` (>= 0.8) or the legacy ``builder_config``."""
    pretrained = config.get("pretrained_config")
    if isinstance(pretrained, dict):
        mapping = pretrained.get("mapping")
        if isinstance(mapping, dict):
            tp = int(mapping.get("tp_size", 1))
            pp = int(mapping.get("pp_size", 1))
            return int(mapping.get("world_size", tp * pp))
    builder = config.get("builder_config")
    if isinstance(builder, dict):
        return int(builder.get("tensor_parallel", 1)) * int(builder.get("pipeline_parallel", 1))
    return 1


def check_engine_dir(engine_dir: Path, profile: ContainerProfile, *, world_size: int) -> EngineInfo:
    """Refuse an engine directory that does not match the plan and the profile."""
    config = read_engine_config(engine_dir)
    build_config, version = _build_config_and_version(config, profile)
    declared = world_size_of(config)
    if declared != world_size:
        raise StepError(f"engine config declares world size {declared}, the plan has {world_size}")
    return EngineInfo(version=version, world_size=world_size, rank_files=_rank_files(engine_dir, world_size),
                      stand_in=bool(config.get("stand_in", False)), build_config=build_config)


def _build_config_and_version(config: dict[str, object], profile: ContainerProfile) -> tuple[dict[str, object], str]:
    """The config's build settings (0.7's ``builder_config``, later ``build_config``) and the TensorRT-LLM
    version that wrote it, which must be the profile's."""
    legacy = profile.workflow == "legacy"
    key = "builder_config" if legacy else "build_config"
    build_config = config.get(key)
    if not isinstance(build_config, dict):
        raise StepError(f"engine config.json has no '{key}'", hint="rebuild the engine with the profile's tools")
    if release(profile.tensorrt_llm) >= (0, 8) and not isinstance(config.get("pretrained_config"), dict):
        raise StepError("engine config.json has no 'pretrained_config' (required since TensorRT-LLM 0.8)")
    version = str(config.get("version") or (build_config.get("tensorrt_llm_version") if legacy else "") or "")
    if version != profile.tensorrt_llm:
        raise StepError(f"engines were built by TensorRT-LLM '{version or 'unknown'}', the profile "
                        f"{profile.name} expects {profile.tensorrt_llm}",
                        hint="build inside the profile's image (--runner docker)")
    return build_config, version


def _rank_files(engine_dir: Path, world_size: int) -> tuple[str, ...]:
    """The engine files rank0..rank<world_size - 1>, each once and none empty."""
    ranks = sorted((int(m.group(1)), p.name) for p in engine_dir.iterdir() if (m := RANK_FILE.match(p.name)))
    if [rank for rank, _ in ranks] != list(range(world_size)):
        raise StepError(f"expected {world_size} engine file(s) rank0..rank{world_size - 1}, found "
                        f"{len(ranks)}: {', '.join(name for _, name in ranks) or 'none'}",
                        hint="the engine build is incomplete; rebuild")
    empty = [name for _, name in ranks if (engine_dir / name).stat().st_size == 0]
    if empty:
        raise StepError(f"empty engine file(s): {', '.join(empty)}", hint="rebuild the engine")
    return tuple(name for _, name in ranks)


def gpu_sm(nvidia_smi: str | None = None) -> tuple[str | None, str | None]:
    """``("sm90", "NVIDIA H100 80GB HBM3")`` of GPU 0 of this host, ``(None, None)`` without one."""
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi is None:
        return None, None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if not first:
        return None, None
    cap, _, name = (part.strip() for part in first.partition(","))
    major, _, minor = cap.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None, name or None
    return f"sm{major}{minor}", name or None
