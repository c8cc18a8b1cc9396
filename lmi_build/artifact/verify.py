"""Verify an artifact: manifest valid, every file intact, layout complete, and compatible with the
serving target (container toolchain, GPU SM, Neuron platform, device count, compiler flags).

Engines and NEFFs fail late and obscurely on the wrong TensorRT/neuronx-cc version or hardware, so
every mismatch is refused here with a message naming both sides. No torch import.
"""

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from lmi_build.artifact.files import MANIFEST_NAME, inside_artifact, verify_entries, walk_files
from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import ArtifactTarget, TargetsByName, profile_owner
from lmi_build.core.errors import LmiBuildError, OptionError, VerifyError
from lmi_build.core.hashing import tree_digest
from lmi_build.core.reading import BadFile, read_regular_bytes
from lmi_build.core.types import PlanMessage
from lmi_build.options.properties import read_properties_with_lines
from lmi_build.planning.context import read_text
from lmi_build.planning.gpus import normalize_sm
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.startup import StartupOutcome


class CheckOutcome(BaseModel):
    """One check of ``verify`` (the manifest, the files, the layout, the serving target) and what it found."""

    name: str
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []


class VerifyReport(BaseModel):
    valid: bool
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    artifact: dict[str, Any] = {}
    # What the serving container release does with the artifact at start-up (--for-container, where
    # the artifact's target models its containers' start-up): outcome, loader, resolved keys, rules.
    startup: StartupOutcome | None = None
    # Each check with what it found (a JUnit report's test cases); not in --json, which lists the findings.
    checks: list[CheckOutcome] = Field(default=[], exclude=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def serving_target(
    targets: TargetsByName,
    *,
    container: str | None = None,
    gpu: str | None = None,
    neuron_platform: str | None = None,
    devices: int | None = None,
    compiler_flags: str | None = None,
) -> ServingTarget:
    """A ServingTarget from CLI values; a container's versions come from the profile of the target
    that owns it (``targets``: the registry the caller hands down)."""
    versions: dict[str, str] = {}
    engine_capable = True
    owner: str | None = None
    if container is not None:
        target, facts = profile_owner(targets, container)
        versions, engine_capable, owner = dict(facts.versions), facts.engine_capable, target.name
    if neuron_platform is not None and neuron_platform not in ("inf2", "trn1"):
        raise OptionError(f"unknown Neuron platform '{neuron_platform}'", hint="use inf2 or trn1")
    if devices is not None and devices < 1:
        raise OptionError(f"--devices must be at least 1, got {devices}", hint="give the GPU or NeuronCore count")
    return ServingTarget(
        container=container, container_target=owner, versions=versions, engine_capable=engine_capable,
        gpu_sm=normalize_sm(gpu) if gpu else None,
        neuron_platform=neuron_platform,
        devices=devices, compiler_flags=compiler_flags,
    )


def _msg(code: str, message: str, hint: str | None = None) -> PlanMessage:
    return PlanMessage(code=code, message=message, hint=hint)


def check_files(root: Path, manifest: Manifest, *, rehash: bool) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """Every manifest file present with its size (and SHA-256 when ``rehash``); extra files warn."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    if tree_digest((f.path, f.sha256) for f in manifest.files) != manifest.content_digest:
        errors.append(_msg("manifest_digest", "the manifest's content_digest does not match its own file list",
                           "the manifest was edited: rebuild the artifact"))
    for problem in verify_entries(root, list(manifest.files), rehash=rehash):
        entry = problem.entry
        if problem.kind == "missing":
            errors.append(_msg("file_missing", f"missing file {entry.path} ({entry.size} bytes in the manifest)",
                               "the artifact is incomplete: re-download or rebuild it"))
        elif problem.kind == "size":
            errors.append(_msg("file_size", f"{entry.path} is {problem.found_size} bytes, the manifest says {entry.size}",
                               "the file was changed or replaced: re-download or rebuild the artifact"))
        else:
            errors.append(_msg("file_hash", f"{entry.path} content changed: sha256 {(problem.found_sha256 or '')[:12]}… "
                                            f"but the manifest says {entry.sha256[:12]}…",
                               "the file was modified after the build: re-download or rebuild the artifact"))
    listed = {entry.path for entry in manifest.files}
    try:
        present = walk_files(root)
    except ValueError as error:
        errors.append(_msg("symlink", str(error), "artifacts hold regular files only: replace the link by the file"))
        present = []
    for path in present:
        rel = path.relative_to(root).as_posix()
        if rel not in listed:
            warnings.append(_msg("file_extra", f"unexpected file {rel} (not in the manifest)",
                                 "remove it, or rebuild the artifact if it belongs there"))
    return errors, warnings


SERVING_PROPERTIES = "serving.properties"
_TRUE = frozenset({"true", "yes", "1"})


def read_serving_record(root: Path) -> dict[str, str] | None:
    """The values of the artifact's serving.properties (None when it has none)."""
    path = root / SERVING_PROPERTIES
    return read_properties_with_lines(path).as_dict() if path.is_file() else None


def check_serving_record(found: dict[str, str] | None, manifest: Manifest) -> list[PlanMessage]:
    """serving.properties (``found``, its values) is what the manifest recorded, and the record
    agrees with the plan on trust_remote_code. The file's hash alone cannot tell an edit whose hash
    was written into the manifest too; now the manifest's record of the values and its plan must be
    edited as well. (A manifest rewritten consistently everywhere is indistinguishable without a
    signature.)"""
    if found is None:
        return []  # a layout that needs the file says so; a listed file that is missing is a file error
    errors = []
    recorded = manifest.serving_properties
    if found != recorded:
        differing = sorted(key for key in found.keys() | recorded.keys() if found.get(key) != recorded.get(key))
        shown = ", ".join(differing[:5]) + (f" and {len(differing) - 5} more" if len(differing) > 5 else "")
        errors.append(_msg("serving_properties_edited",
                           f"serving.properties differs from the manifest's record of it: {shown}",
                           "the file was edited after the build: rebuild or re-pull the artifact"))
    # The manifest's plan is JSON as read (``Manifest.plan``): its values typed as text, whatever an edit made them.
    planned_options = {key: str(value) for key, value in (manifest.plan.get("options") or {}).items()}
    planned = read_text(planned_options, CommonOptions).trust_remote_code or "false"
    for where, values in (("serving.properties", found), ("the manifest's record", recorded)):
        written = read_text(values, CommonOptions).trust_remote_code or "false"
        if written.lower() in _TRUE and planned.lower() not in _TRUE:
            errors.append(_msg("trust_remote_code_edited",
                               f"{where} turns on option.trust_remote_code, which the plan the artifact was built "
                               "from does not", "rebuild with --trust-remote-code if the model's code is trusted"))
            break
    return errors


def check_layout(root: Path, manifest: Manifest, target: ArtifactTarget) -> tuple[list[PlanMessage], list[PlanMessage]]:
    layout = target.layouts().get(manifest.layout)
    if layout is None:
        return [], [_msg("layout_unknown", f"layout '{manifest.layout}' is unknown to this lmi-build; "
                                           "its structure was not checked", "upgrade lmi-build")]
    return list(layout.check(root)), []


def local_reader(root: Path, manifest: Manifest) -> Callable[[str], bytes | None]:
    """A listed file of the artifact under ``root`` as the target's record check reads it: only a
    path the manifest lists, only a regular file reached through real directories (never a link),
    bounded in size; None otherwise (the file checks report it)."""
    listed = {entry.path for entry in manifest.files}

    def read(rel: str) -> bytes | None:
        if rel not in listed or not inside_artifact(root, rel):
            return None
        try:
            return read_regular_bytes(root / rel, what="artifact file", follow=False)
        except BadFile:
            return None

    return read


def built_by_stand_in(manifest: Manifest) -> bool:
    """Whether a test stand-in of the vendor compiler wrote the artifact's engines or NEFFs."""
    return manifest.toolchain.found.get("stand_in") == "true"


def check_compatibility(manifest: Manifest, target: ArtifactTarget,
                        serving: ServingTarget) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """Refuse every mismatch between what the artifact is bound to and where it will be served: what
    holds for every artifact here (stand-in output), the rest (a container of another target among
    them) by the artifact's own target."""
    errors: list[PlanMessage] = []
    warnings: list[PlanMessage] = []
    if built_by_stand_in(manifest):
        # Written by a test stand-in of the vendor compiler: structurally valid, never servable,
        # so checking it against a serving target is an error; a plain integrity check warns.
        stand_in = _msg("stand_in", f"the {target.artifact_label} were written by a STAND-IN compiler, not a real "
                        "build", "rebuild with the real toolchain (--runner docker or local on a GPU host)")
        (errors if serving.given else warnings).append(stand_in)
    own_errors, own_warnings = target.check_compatibility(manifest, serving)
    return errors + own_errors, warnings + own_warnings


def summarize(manifest: Manifest, location: str) -> dict[str, Any]:
    """The short description of an artifact that verify reports and inspect starts from."""
    return {
        "location": location,
        "target": manifest.target,
        "layout": manifest.layout,
        "model": manifest.source.model_dump(mode="json"),
        "recipe": f"{manifest.recipe} v{manifest.recipe_version}",
        "cache_key": manifest.cache_key,
        "content_digest": manifest.content_digest,
        "files": len(manifest.files),
        "total_bytes": manifest.total_bytes,
        "toolchain": {"profile": manifest.toolchain.profile, "image": manifest.toolchain.image,
                      **{k: manifest.toolchain.version(k) for k in sorted({*manifest.toolchain.expected,
                                                                            *manifest.toolchain.found})}},
        "hardware": manifest.hardware.model_dump(mode="json", exclude_none=True),
        "builder": manifest.builder,
        "created_at": manifest.created_at.isoformat(),
    }


def report(errors: list[PlanMessage], warnings: list[PlanMessage], artifact: dict[str, Any],
           startup: StartupOutcome | None = None) -> VerifyReport:
    return VerifyReport(valid=not errors, errors=errors, warnings=warnings, artifact=artifact, startup=startup)


def container_startup(manifest: Manifest, target: ArtifactTarget, serving: ServingTarget) -> StartupOutcome | None:
    """The serving release's start-up outcome, where a container of the artifact's own target is given."""
    if serving.container is None or serving.container_target not in (None, manifest.target):
        return None
    return target.container_startup(manifest, serving)


def verify_local(path: Path, targets: TargetsByName, *, serving: ServingTarget | None = None,
                 rehash: bool = True, records: bool = True) -> VerifyReport:
    """Verify an artifact directory. A missing or corrupt manifest is an invalid report, not a raise;
    ``targets``: the targets an artifact may be of (the registry, or the one a build runs).
    ``records``: check the manifest's record of the facts the serving checks use against the files
    (``record_problems``); the packager's check of the manifest it has just written skips it."""
    if not path.is_dir():
        raise LmiBuildError(f"{path} is not a directory", hint="give the artifact directory or an s3:// URL",
                            code="not_found")
    checks = Checks()
    try:
        manifest = load_manifest(path)
    except VerifyError as error:
        checks.add("manifest", [_msg("manifest", error.message, error.hint)])
        return checks.report({"location": str(path)})
    checks.add("manifest")
    checks.add("files", *check_files(path, manifest, rehash=rehash))
    try:
        checks.add(SERVING_PROPERTIES, check_serving_record(read_serving_record(path), manifest))
    except OptionError as error:
        checks.add(SERVING_PROPERTIES, [_msg("serving_properties", error.message,
                                             "the file was edited after the build: rebuild it")])
    target = targets.get(manifest.target)
    if target is None:
        checks.add("target", [_msg("target_unknown", f"artifact of target '{manifest.target}', which this lmi-build "
                                   f"does not know ({', '.join(targets)})", "upgrade lmi-build")])
        return checks.report(summarize(manifest, str(path)))
    serving = serving or ServingTarget()
    if records:
        checks.add("records", target.record_problems(manifest, local_reader(path, manifest)))
    checks.add("layout", *check_layout(path, manifest, target))
    checks.add(compatibility_check(serving), *check_compatibility(manifest, target, serving))
    return checks.report(summarize(manifest, str(path)), container_startup(manifest, target, serving))


class Checks:
    """The checks of one verification, in the order they ran; the report's errors and warnings are theirs, in that order."""

    def __init__(self) -> None:
        self.done: list[CheckOutcome] = []

    def add(self, name: str, errors: Iterable[PlanMessage] = (), warnings: Iterable[PlanMessage] = ()) -> None:
        self.done.append(CheckOutcome(name=name, errors=list(errors), warnings=list(warnings)))

    def report(self, artifact: dict[str, Any], startup: StartupOutcome | None = None) -> VerifyReport:
        errors = [message for check in self.done for message in check.errors]
        warnings = [message for check in self.done for message in check.warnings]
        return VerifyReport(valid=not errors, errors=errors, warnings=warnings, artifact=artifact, startup=startup,
                            checks=self.done)


def compatibility_check(serving: ServingTarget) -> str:
    """The compatibility check's name: what it was checked against (a plain integrity check: none given)."""
    given = [f"container {serving.container}" if serving.container else "",
             serving.gpu_sm or "", serving.neuron_platform or "",
             f"{serving.devices} devices" if serving.devices is not None else ""]
    shown = ", ".join(part for part in given if part)
    return f"compatibility with {shown}" if shown else "compatibility"


__all__ = ["MANIFEST_NAME", "SERVING_PROPERTIES", "CheckOutcome", "Checks", "ServingTarget", "VerifyReport", "built_by_stand_in",
           "check_compatibility", "check_serving_record", "compatibility_check", "container_startup", "read_serving_record", "report",
           "serving_target", "summarize", "verify_local"]
