"""The provenance manifest ``lmi-build.json``: what an artifact is, where it came from, what it
runs on, how it was built, and the size and SHA-256 of every file in it.

The JSON schema (``manifest.schema.json`` beside this file, ``schema_version`` 1) is generated
from :class:`Manifest`; a test keeps the checked-in file equal to the model. Readers validate with
the pydantic model, which enforces the same schema without a jsonschema dependency.
"""

import json
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lmi_build import __version__
from lmi_build.artifact.files import MANIFEST_NAME, FileEntry, list_files
from lmi_build.artifact.hygiene import (
    host_path_leaks,
    host_roots,
    redact_tree,
    secret_values,
    starts_with_root,
)
from lmi_build.core.errors import VerifyError
from lmi_build.core.fs import atomic_write_text
from lmi_build.core.hashing import tree_digest
from lmi_build.core.reading import BadFile, parse_json
from lmi_build.core.types import FrozenModel, ModelIdentity, TargetName
from lmi_build.core.versions import installed_versions
from lmi_build.planning.plan import BuildPlan
from lmi_build.reporting import events

SCHEMA_VERSION = 1
SCHEMA_ID = "https://lmi-build.dev/schemas/manifest/v1.json"
SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")

# Packages whose versions shape the produced files; read from metadata, never imported.
BUILD_PACKAGES = ("torch", "transformers", "nvidia-modelopt", "tokenizers", "safetensors",
                  "huggingface_hub", "accelerate", "tensorrt_llm", "tensorrt", "neuronx-cc",
                  "transformers-neuronx", "optimum-neuron")

# Options that only steer the build on the build host; their values are often host paths.
BUILD_ONLY_KEYS = frozenset({"option.model_id", "option.save_mp_checkpoint_path", "model_dir",
                             "upload_checkpoints_s3url", "properties_dir"})


class StepTiming(FrozenModel):
    name: str  # "resolve", "quantize", "convert", "engine_build", "package", ...
    seconds: float = Field(ge=0)
    detail: str | None = None  # one line, e.g. "W8A8_SQ_PER_CHANNEL, 32 samples"
    # Checkpoint steps (convert/quantize on the build host): where they really ran and their peak.
    device: Literal["cpu", "cuda"] | None = None
    gpus: int | None = Field(default=None, ge=0)
    peak_rss_bytes: int | None = Field(default=None, ge=0)


class HardwareTarget(FrozenModel):
    """What the produced files are bound to: the GPU SM the engines were built on, the Neuron
    platform the NEFFs were compiled for. None when the artifact is not bound (hf layout)."""

    gpu_sm: str | None = None  # "sm90"
    gpu_name: str | None = None  # "NVIDIA H100 80GB HBM3", informative
    neuron_platform: Literal["inf2", "trn1"] | None = None


class BuildRecord(BaseModel):
    """What the pipeline learns while building (filled step by step, then frozen into the manifest)."""

    steps: list[StepTiming] = []
    hardware: HardwareTarget = HardwareTarget()
    # Toolchain facts found at build time, e.g. {"tensorrt_llm": "0.8.0"} read from the engine's
    # config.json or `neuronx-cc --version`; they win over the plan's expected versions.
    toolchain: dict[str, str] = {}
    builder: str = f"lmi-build {__version__}"
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    @contextmanager
    def timed(self, name: str, detail: str | None = None, *, estimate_s: float | None = None) -> Iterator[None]:
        """Record the wall time of a step (also when it fails, so a failed build shows where), and
        announce its start (with the plan's ``estimate_s``) and its end (``events.step``)."""
        start = time.perf_counter()
        try:
            with events.step(name, estimate_s=estimate_s, detail=detail):
                yield
        finally:
            self.steps.append(StepTiming(name=name, seconds=round(time.perf_counter() - start, 3), detail=detail))

    def record_checkpoint(self, name: str, result: Any) -> None:
        """Add where the checkpoint step ``name`` ran (a ``quantize.export.CheckpointResult``) to its entry."""
        placement = result.placement
        for index in range(len(self.steps) - 1, -1, -1):
            step = self.steps[index]
            if step.name != name:
                continue
            writer = {"stream": "ModelOpt layout written tensor by tensor",
                      "modelopt": "ModelOpt export"}.get(getattr(result, "writer", None) or "")
            where = [*([writer] if writer else []), *([placement.describe()] if placement is not None else [])]
            if result.cached:
                where.append("restored from the checkpoint cache")
            detail = "; ".join([*([step.detail] if step.detail else []), *where]) or None
            self.steps[index] = step.model_copy(update={
                "detail": detail,
                "device": placement.device if placement is not None else None,
                "gpus": placement.gpus if placement is not None else None,
                "peak_rss_bytes": None if result.cached else result.peak_rss_bytes,
            })
            return


class ToolchainRecord(FrozenModel):
    profile: str | None = None  # container profile (trtllm) or SDK pin (neuronx)
    image: str | None = None  # the serving container image the artifact is built for
    expected: dict[str, str] = {}  # versions the plan targeted (from the profile)
    found: dict[str, str] = {}  # versions observed while building (BuildRecord.toolchain)

    def version(self, name: str) -> str | None:
        """The version that really built the artifact: found at build time, else the planned one."""
        return self.found.get(name) or self.expected.get(name)


class BuildEnvironment(FrozenModel):
    python: str
    os: str  # "Linux 6.8.0-1019-aws"
    arch: str  # "x86_64"
    packages: dict[str, str] = {}  # distribution name -> version, only those installed


class Manifest(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        title="lmi-build artifact manifest",
        json_schema_extra={"$id": SCHEMA_ID, "$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    schema_version: Literal[1] = 1
    builder: str  # "lmi-build 0.1.0"
    tool_version: str
    created_at: datetime
    target: TargetName
    layout: str
    recipe: str
    recipe_version: int
    source: ModelIdentity
    cache_key: str
    toolchain: ToolchainRecord
    hardware: HardwareTarget
    environment: BuildEnvironment
    steps: list[StepTiming] = []
    serving_properties: dict[str, str] = {}
    plan: dict[str, Any]  # BuildPlan.to_json(), build-only host values redacted
    files: list[FileEntry]
    total_bytes: int = Field(ge=0)
    content_digest: str  # hashing.tree_digest over (path, sha256) of every file

    @property
    def world_size(self) -> int | None:
        build = self.plan.get("build") or {}
        tp, pp = build.get("tp"), build.get("pp") or 1
        return int(tp) * int(pp) if tp is not None else None


def build_environment() -> BuildEnvironment:
    packages = installed_versions(BUILD_PACKAGES)
    return BuildEnvironment(
        python=platform.python_version(),
        os=f"{platform.system()} {platform.release()}".strip(),
        arch=platform.machine(),
        packages=packages,
    )


def _plan_for_manifest(plan: BuildPlan, roots: list[str]) -> dict[str, Any]:
    """The plan as JSON, with build-only option values that are host paths replaced by the source
    identity (they are inputs of this host, not facts of the artifact)."""
    data = plan.to_json()
    for key in BUILD_ONLY_KEYS:
        value = data["options"].get(key)
        if isinstance(value, str) and (value.startswith("/") or starts_with_root(value, roots)):
            data["options"][key] = f"<{plan.model.kind}:{plan.model.id}>"
    return data


def build_manifest(
    plan: BuildPlan,
    *,
    layout: str,
    record: BuildRecord,
    artifact_dir: Path,
    serving_properties: dict[str, str],
    extra_roots: tuple[Path, ...] = (),
) -> Manifest:
    """Hash every file under ``artifact_dir`` and describe the artifact."""
    files = list_files(artifact_dir)
    roots = host_roots(artifact_dir, *extra_roots)
    secrets = secret_values()
    manifest = Manifest(
        builder=record.builder,
        tool_version=__version__,
        created_at=datetime.now(timezone.utc),
        target=plan.target,
        layout=layout,
        recipe=plan.recipe,
        recipe_version=plan.recipe_version,
        source=plan.model,
        cache_key=plan.cache_key,
        toolchain=ToolchainRecord(profile=plan.toolchain.profile, image=plan.toolchain.image,
                                  expected=dict(plan.toolchain.versions), found=dict(record.toolchain)),
        hardware=record.hardware,
        environment=build_environment(),
        steps=list(record.steps),
        serving_properties=dict(serving_properties),
        plan=_plan_for_manifest(plan, roots),
        files=files,
        total_bytes=sum(entry.size for entry in files),
        content_digest=tree_digest((entry.path, entry.sha256) for entry in files),
    )
    # Secrets are scrubbed (they may sit in an env-derived option); host paths are refused (a bug).
    return Manifest.model_validate(redact_tree(manifest.model_dump(mode="json"), secrets))


def check_portable(manifest: Manifest, *extra_roots: Path) -> None:
    """Raise when the manifest holds an absolute path of this host (a bug of whoever put it there)."""
    leaks = host_path_leaks(manifest.model_dump(mode="json"), host_roots(*extra_roots))
    if leaks:
        raise VerifyError(
            f"manifest would record build-host paths at {', '.join(leaks[:5])}",
            hint="this is a bug in lmi-build: please report it with the plan (`lmi-build plan --json`)",
        )


def manifest_json(manifest: Manifest) -> str:
    return json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def write_manifest(directory: Path, manifest: Manifest, *, extra_roots: tuple[Path, ...] = ()) -> Path:
    """Write ``lmi-build.json`` (refusing host paths) atomically."""
    check_portable(manifest, directory, *extra_roots)
    return atomic_write_text(directory / MANIFEST_NAME, manifest_json(manifest))


def parse_manifest(text: str | bytes, origin: str) -> Manifest:
    """Validate manifest JSON text; every failure is a one-line VerifyError naming ``origin``."""
    try:
        data = parse_json(text, what=origin)
    except BadFile as error:
        raise VerifyError(error.message,
                          hint="the artifact is corrupt: rebuild or re-download it") from None
    if not isinstance(data, dict):
        raise VerifyError(f"{origin} is not a JSON object", hint="the artifact is corrupt: rebuild it")
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise VerifyError(
            f"{origin} has schema_version {version}, this lmi-build reads up to {SCHEMA_VERSION}",
            hint="upgrade lmi-build: pip install -U lmi-build",
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        raise VerifyError(
            f"{origin} does not match the manifest schema v{SCHEMA_VERSION}: {where}: {first['msg']}"
            + (f" (+{error.error_count() - 1} more)" if error.error_count() > 1 else ""),
            hint="the artifact is corrupt or was not written by lmi-build: rebuild it",
        ) from None


def load_manifest(path_or_dir: Path) -> Manifest:
    """Read and validate ``lmi-build.json`` (given the file or the artifact directory)."""
    path = path_or_dir / MANIFEST_NAME if path_or_dir.is_dir() else path_or_dir
    if not path.is_file():
        raise VerifyError(
            f"no {MANIFEST_NAME} in {path.parent}",
            hint="this is not an lmi-build artifact (or it is incomplete): build it with lmi-build",
        )
    return parse_manifest(path.read_bytes(), str(path))


def manifest_schema() -> dict[str, Any]:
    """The JSON schema of the manifest (what ``manifest.schema.json`` holds)."""
    return Manifest.model_json_schema(mode="serialization")


def write_schema(path: Path = SCHEMA_PATH) -> None:
    """Regenerate the checked-in schema: ``python -m lmi_build.artifact.manifest``."""
    path.write_text(json.dumps(manifest_schema(), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_schema(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_PATH)
