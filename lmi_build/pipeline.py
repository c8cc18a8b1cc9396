"""Runs a saved plan: check output -> cache -> fetch -> ``target.build`` -> package -> publish.

The plan decides everything; this module only orchestrates. Targets are looked up through the
registry, and each target's ``build`` turns the fetched model into the directory its layout
packages. Nothing is written to the output directory until the packager has verified the staged
artifact.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from lmi_build.artifact.manifest import BuildRecord, StepTiming
from lmi_build.building.context import BuildContext, BuildOutcome, BuildSettings
from lmi_build.building.target import get_target
from lmi_build.errors import InvalidPlan, SourceError, UnsupportedTarget
from lmi_build.fs import make_temp_dir
from lmi_build.output import current
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import SavedPlan
from lmi_build.sources.base import ResolvedSource
from lmi_build.types import ModelIdentity

if TYPE_CHECKING:
    from lmi_build.storage.build_cache import RemoteBuildCache


def run_plan(saved: SavedPlan, settings: BuildSettings) -> BuildOutcome:
    """Execute the saved plan and return what was produced."""
    plan = saved.plan
    if not plan.valid:
        raise InvalidPlan("the plan has errors; nothing was built", hint="run `lmi-build plan` to see them")
    target = get_target(plan.target)
    output = settings.output.absolute()
    from lmi_build.artifact.packager import check_output

    check_output(output, settings.overwrite)  # before any work, not after an hour of it
    target.preflight(saved, settings)
    if settings.publish is not None:
        _check_publish_target(settings)
    remote = _remote_cache(settings)
    if settings.until == "artifact" and settings.use_cache:
        cached = _from_cache(plan, output, settings)
        if cached is None and remote is not None:
            cached = _from_remote_cache(remote, plan, output, settings)
        if cached is not None:
            return _maybe_publish(cached, settings, remote)

    record = BuildRecord()
    with record.timed("fetch", detail=plan.model.id):  # the identity, never a host path
        source = fetch(saved, settings.endpoint_url)
    # The work directory sits beside the output so produced files can be hard-linked into it.
    work = make_temp_dir(output, "work")
    try:
        ctx = BuildContext(saved=saved, settings=settings, source=source, work=work, record=record)
        target.build(ctx)
        if ctx.stopped is not None:
            return ctx.stopped
        assert ctx.produced is not None  # a target either stops or produces
        from lmi_build.artifact.packager import package

        package(plan, layout=ctx.layout, produced=ctx.produced, source_dir=source.path,
                output_dir=output, record=record, overwrite=settings.overwrite, copy=settings.copy)
        outcome = BuildOutcome(plan=plan, status="artifact", output=output, steps=_steps_of(output),
                               stand_in=ctx.stand_in,
                               message="artifact built from STAND-IN engines (not a real TensorRT-LLM build)"
                               if ctx.stand_in else "artifact built and verified")
        if settings.use_cache and not ctx.stand_in:
            _store_in_cache(plan, output)
            if remote is not None:
                _store_in_remote_cache(remote, plan, output)
        return _maybe_publish(outcome, settings, remote)
    finally:
        if settings.keep_work:
            current().info(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def fetch(saved: SavedPlan, endpoint_url: str | None = None) -> ResolvedSource:
    """The plan's model with its weights, refused unless it is the model that was planned."""
    from lmi_build.sources.resolve import resolve_source

    inputs = saved.inputs
    source = resolve_source(inputs.model, purpose="build", revision=inputs.revision,
                            allow_pickle=inputs.allow_pickle, endpoint_url=endpoint_url)
    check_identity(saved.plan.model, source.identity, inputs.model)
    return source


def check_identity(planned: ModelIdentity, fetched: ModelIdentity, ref: str) -> None:
    """The fetched model must be the planned one: same kind, revision and content digest. A local
    directory may have moved (its name is not its identity); its content may not have changed."""
    problems: list[str] = []
    if planned.kind != fetched.kind:
        problems.append(f"a {fetched.kind} model instead of a {planned.kind} one")
    elif planned.kind != "local" and planned.id != fetched.id:
        problems.append(f"model {fetched.id} instead of {planned.id}")
    if planned.revision and fetched.revision and planned.revision != fetched.revision:
        problems.append(f"revision {fetched.revision} instead of {planned.revision}")
    if planned.digest and fetched.digest and planned.digest != fetched.digest:
        problems.append(f"content {fetched.digest[:19]}… instead of the planned {planned.digest[:19]}…")
    if problems:
        raise SourceError(f"{ref} is not the model that was planned: " + "; ".join(problems),
                          hint="pin --revision, or plan again for the model as it is now")


# ---- the config-aware artifact cache ----

def _from_cache(plan: BuildPlan, output: Path, settings: BuildSettings) -> BuildOutcome | None:
    from lmi_build.artifact.cache import ArtifactCache

    hit = ArtifactCache().restore(plan.cache_key, output, overwrite=settings.overwrite)
    if hit is None:
        return None
    return BuildOutcome(plan=plan, status="cached", output=output, steps=_steps_of(output),
                        message=f"reused the cached artifact for {plan.cache_key[:19]}… (verified)")


def _store_in_cache(plan: BuildPlan, output: Path) -> None:
    from lmi_build.artifact.cache import ArtifactCache

    ArtifactCache().store(plan.cache_key, output)


def _remote_cache(settings: BuildSettings) -> RemoteBuildCache | None:
    """The shared S3 build cache of ``--cache s3://...``, checked before any work."""
    if settings.remote_cache is None or not settings.use_cache:
        return None
    from lmi_build.storage.build_cache import RemoteBuildCache

    remote = RemoteBuildCache(settings.remote_cache, endpoint_url=settings.endpoint_url)
    remote.check()
    return remote


def _store_in_remote_cache(remote: RemoteBuildCache, plan: BuildPlan, output: Path) -> None:
    """Like the local cache, a shared cache that cannot be written never fails the build that
    produced a verified artifact: it is reported, and publish (if asked) uploads as usual."""
    from lmi_build.errors import LmiBuildError

    try:
        remote.store(plan.cache_key, output)
    except LmiBuildError as error:
        current().warn(f"could not store the artifact in the shared cache {remote.root}: {error.message}")


def _from_remote_cache(remote: RemoteBuildCache, plan: BuildPlan, output: Path,
                       settings: BuildSettings) -> BuildOutcome | None:
    """A verified entry of the shared cache, pulled (every file verified again) into ``output``."""
    from lmi_build.artifact.packager import check_output, install_directory
    from lmi_build.storage.pull import pull

    entry = remote.lookup(plan.cache_key)
    if entry is None:
        return None
    check_output(output, settings.overwrite)
    staging = make_temp_dir(output, "cache")
    try:
        pull(entry.url, staging / "artifact", endpoint_url=settings.endpoint_url)
        install_directory(staging / "artifact", output, overwrite=settings.overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _store_in_cache(plan, output)
    return BuildOutcome(plan=plan, status="cached", output=output, steps=_steps_of(output),
                        message=f"reused the shared cache entry {entry.url} (verified)")


def _steps_of(artifact: Path) -> list[StepTiming]:
    from lmi_build.artifact.manifest import load_manifest

    return list(load_manifest(artifact).steps)


def _check_publish_target(settings: BuildSettings) -> None:
    """A wrong bucket, endpoint or missing credentials must fail before the build, not after it."""
    from lmi_build.storage.client import check_bucket, endpoint_label, s3_client
    from lmi_build.storage.s3url import parse_s3_url

    assert settings.publish is not None
    target = parse_s3_url(settings.publish)
    check_bucket(s3_client(settings.endpoint_url), target, endpoint_label(settings.endpoint_url))


def _maybe_publish(outcome: BuildOutcome, settings: BuildSettings,
                   remote: RemoteBuildCache | None = None) -> BuildOutcome:
    if settings.publish is None:
        return outcome
    if outcome.stand_in:
        raise UnsupportedTarget("refusing to publish an artifact built from STAND-IN engines",
                                hint="build with the real TensorRT-LLM toolchain")
    entry = remote.lookup(outcome.plan.cache_key) if remote is not None else None
    if remote is not None and entry is not None:  # in the shared cache: copy server-side, upload nothing
        copied = remote.copy_to(entry, settings.publish)
        outcome.published = {"url": settings.publish, "copied_from": entry.url, "objects": copied}
        return outcome
    from lmi_build.storage.publish import publish

    summary = publish(outcome.output, settings.publish, endpoint_url=settings.endpoint_url)
    outcome.published = {"url": settings.publish, **summary.model_dump(mode="json")}
    return outcome
