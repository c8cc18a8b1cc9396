"""Runs a saved plan: check output -> cache -> fetch -> ``target.build`` -> package -> publish.

The plan decides everything; this module only orchestrates. The caller hands it the plan's target
(``lmi_build.targets``), whose ``build`` turns the fetched model into the directory its layout
packages. Nothing is written to the output directory until the packager has verified the staged
artifact.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from lmi_build.artifact.cache import ArtifactCache
from lmi_build.artifact.manifest import BuildRecord, StepTiming, load_manifest
from lmi_build.artifact.output_place import check_output_place, protected_places
from lmi_build.artifact.packager import check_output, install_directory, package
from lmi_build.building.context import BuildContext, BuildOutcome, BuildSettings
from lmi_build.building.target import Target
from lmi_build.core.errors import InvalidPlan, LmiBuildError, StepError, Terminated, UnsupportedTarget
from lmi_build.core.fs import (
    DirectoryBusy,
    directory_lock,
    interruptible,
    make_temp_dir,
    remove_stale_temp_dirs,
    take_late_signals,
)
from lmi_build.core.paths import cache_root
from lmi_build.planning.plan import BuildPlan
from lmi_build.planning.saved import SavedPlan
from lmi_build.reporting import events
from lmi_build.reporting.output import current
from lmi_build.runners.executing import LOG_DIR
from lmi_build.sources.base import ResolvedSource
from lmi_build.sources.identity import check_identity
from lmi_build.sources.resolve import resolve_source
from lmi_build.storage.build_cache import RemoteBuildCache
from lmi_build.storage.client import check_bucket, check_writable, endpoint_label, s3_client
from lmi_build.storage.publish import publish
from lmi_build.storage.pull import pull
from lmi_build.storage.s3url import parse_s3_url


def run_plan(saved: SavedPlan, settings: BuildSettings, target: Target) -> BuildOutcome:
    """Execute the saved plan with its target and return what was produced."""
    plan = saved.plan
    if not plan.valid:
        raise InvalidPlan("the plan has errors; nothing was built", hint="run `lmi-build plan` to see them")
    if target.name != plan.target:
        raise InvalidPlan(f"a {plan.target} plan cannot be built by the {target.name} target",
                          hint=f"run it with `lmi-build {plan.target} --plan ...`")
    output = settings.output.absolute()
    # before any work, not after an hour of it
    check_output_place(settings.output, overwrite=settings.overwrite, protected=_protected(saved, settings))
    check_output(output, settings.overwrite)
    with _output_locked(output):
        return _run_locked(saved, settings, output, target)


def _protected(saved: SavedPlan, settings: BuildSettings) -> dict[str, Path]:
    model = saved.inputs.model
    local = Path(model).expanduser() if not model.startswith(("demo:", "s3://")) and Path(model).expanduser().exists() \
        else None
    inputs = {f"the input file {path.name}": path for path in settings.inputs}
    return protected_places(model_dir=local, cache=cache_root(),
                            extra={**settings.run.input_dirs(), "the calibration file": saved.inputs.calib_data,
                                   **inputs})


@contextmanager
def _output_locked(output: Path) -> Iterator[None]:
    """One build per output at a time (the loser fails at once); a killed build's hidden work and
    staging directories beside the output are removed while the lock is held."""
    try:
        with directory_lock(output):
            removed, kept = remove_stale_temp_dirs(output)
            for stale in removed:
                current().info(f"removed {stale.name}, left behind by a build that was killed")
            for stale, users in kept.items():
                who = ", ".join(f"{name} (pid {pid})" for pid, name in users[:3])
                current().warn(f"kept {stale.name}, left behind by a build that was killed: {who} still works "
                               "in it; it is removed by the first build after that ends")
            yield
    except DirectoryBusy as busy:
        raise LmiBuildError(f"another build is writing {output} ({busy.holder})",
                            hint="wait for it to finish, or choose another --output", code="output_busy") from None


def _run_locked(saved: SavedPlan, settings: BuildSettings, output: Path, target: Target) -> BuildOutcome:
    plan = saved.plan
    check_output(output, settings.overwrite)  # again: another build may have finished into it meanwhile
    target.preflight(saved, settings)
    if settings.publish is not None:
        _check_publish_target(settings)
    remote = _remote_cache(settings)
    if settings.run.until == "artifact" and settings.use_cache:
        cached = _from_cache(plan, output, settings, target)
        if cached is not None:  # another host must not rebuild what we have
            return _after_commit(cached, settings, remote, store_local=False, store_remote="if_missing")
        if remote is not None:
            cached = _from_remote_cache(remote, plan, output, settings)
        if cached is not None:
            return _after_commit(cached, settings, remote, store_local=True, store_remote="no")

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
        if ctx.produced is None or ctx.layout is None:
            raise LmiBuildError(f"the {target.name} target neither produced an artifact directory nor stopped",
                                hint="this is a bug in the target; rerun with --debug and report it")
        # What the build did not write in its own work directory is the user's (--engine-dir, ...).
        users_roots = () if ctx.produced.absolute().is_relative_to(ctx.work.absolute()) else (ctx.produced,)
        package(plan, target=target, layout=ctx.layout, produced=ctx.produced, source_dir=source.path,
                output_dir=output, record=record, overwrite=settings.overwrite, copy=settings.copy,
                users_roots=users_roots)
        # The artifact is in place: from here an interrupt can no longer make this build a failure.
        outcome = BuildOutcome(plan=plan, status="artifact", output=output, steps=_steps_of(output),
                               stand_in=ctx.stand_in,
                               message=f"artifact built from STAND-IN compiler output (not a real {plan.target} build)"
                               if ctx.stand_in else "artifact built and verified")
        stored = settings.use_cache and not ctx.stand_in
        return _after_commit(outcome, settings, remote, store_local=stored, store_remote="yes" if stored else "no")
    except LmiBuildError as error:
        _keep_failed_logs(work, output, error)
        raise
    finally:
        if settings.keep_work:
            current().info(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


class InterruptedAfterCommit(LmiBuildError):
    """Ctrl-C or SIGTERM after the artifact was in place, before the publish it was built for."""

    code = "interrupted"


def _after_commit(outcome: BuildOutcome, settings: BuildSettings, remote: RemoteBuildCache | None, *,
                  store_local: bool, store_remote: Literal["yes", "if_missing", "no"]) -> BuildOutcome:
    """What follows a finished artifact: the cache stores and the publish. An interrupt stops them
    (their partial entries are removed), but the artifact stays built: without ``--publish`` the
    build still succeeds, saying what was skipped; with it, the build fails naming the artifact
    and how to publish it (exit 130, 143 for SIGTERM)."""
    plan, output = outcome.plan, outcome.output
    try:
        with interruptible():
            if store_local:
                _store_in_cache(plan, output)
            if remote is not None and store_remote != "no" \
                    and (store_remote == "yes" or remote.lookup(plan.cache_key) is None):
                _store_in_remote_cache(remote, plan, output)
            published = _maybe_publish(outcome, settings, remote)
    except KeyboardInterrupt as interrupt:
        signum = 15 if isinstance(interrupt, Terminated) else 2
        what = "terminated (SIGTERM)" if signum == 15 else "interrupted"
        if settings.publish is None:
            current().warn(f"{what} after the artifact was in place: it is complete and verified, "
                           "but was not stored in the cache")
            return outcome
        error = InterruptedAfterCommit(f"{what} before {settings.publish} was published; the artifact {output} "
                                       "is complete and verified",
                                       hint=f"publish it with: lmi-build publish {output} {settings.publish}")
        error.exit_code = 128 + signum
        raise error from None
    if take_late_signals():
        current().warn("Ctrl-C came after the artifact was in place: the build finished")
    return published


def _keep_failed_logs(work: Path, output: Path, error: LmiBuildError) -> None:
    """The work directory goes, but the failed step's logs stay where the error message says:
    ``<output>.build-logs`` beside the output (replacing an older failure's). That name is never
    followed: when something else is there (a link planted there, a file, another user's
    directory), the logs go to a new directory beside it instead and the message says so."""
    found = sorted(work.rglob(LOG_DIR))
    if not found or not any(found[0].iterdir()):
        return
    kept = output.with_name(f"{output.name}.{LOG_DIR}")
    if _ours(kept):
        shutil.rmtree(kept, ignore_errors=True)  # an older failure's logs
    try:
        os.rename(found[0], kept)  # a rename never writes through a link (a file or link there: it fails)
        note = ""
    except OSError:
        planted = kept
        kept = Path(tempfile.mkdtemp(prefix=f"{output.name}.{LOG_DIR}-", dir=output.parent))
        os.rename(found[0], kept)  # onto the empty directory just made
        note = f" ({planted} is not a log directory lmi-build wrote, so it was left alone)"
    error.message = error.message.replace(str(found[0]), str(kept))
    error.hint = ((error.hint or "").replace(str(found[0]), str(kept)) or f"logs: {kept}") + note
    if isinstance(error, StepError) and error.log is not None and error.log.is_relative_to(found[0]):
        error.log = kept / error.log.relative_to(found[0])


def _ours(path: Path) -> bool:
    """A real directory (not a link) of this user: what an older failure's logs are."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and (not hasattr(os, "geteuid") or info.st_uid == os.geteuid())


def fetch(saved: SavedPlan, endpoint_url: str | None = None) -> ResolvedSource:
    """The plan's model with its weights, refused unless it is the model that was planned."""
    inputs = saved.inputs
    source = resolve_source(inputs.model, purpose="build", revision=inputs.revision,
                            allow_pickle=inputs.allow_pickle, endpoint_url=endpoint_url)
    check_identity(saved.plan.model, source.identity, inputs.model)
    return source


# ---- the config-aware artifact cache ----

def _from_cache(plan: BuildPlan, output: Path, settings: BuildSettings, target: Target) -> BuildOutcome | None:
    started = time.monotonic()
    hit = ArtifactCache().restore(plan.cache_key, output, {target.name: target}, overwrite=settings.overwrite)
    if hit is None:
        return None
    events.emit("cache_hit", cache="local", key=plan.cache_key, where=str(hit))
    return _cached_outcome(plan, output, "restored from the local cache, verified", started,
                           message=f"reused the cached artifact for {plan.cache_key[:19]}… (verified)")


def _store_in_cache(plan: BuildPlan, output: Path) -> None:
    ArtifactCache().store(plan.cache_key, output)


def _remote_cache(settings: BuildSettings) -> RemoteBuildCache | None:
    """The shared S3 build cache of ``--cache s3://...``, checked before any work."""
    if settings.remote_cache is None or not settings.use_cache:
        return None
    remote = RemoteBuildCache(settings.remote_cache, endpoint_url=settings.endpoint_url)
    remote.check()
    return remote


def _store_in_remote_cache(remote: RemoteBuildCache, plan: BuildPlan, output: Path) -> None:
    """Like the local cache, a shared cache that cannot be written never fails the build that
    produced a verified artifact: it is reported, and publish (if asked) uploads as usual."""
    try:
        remote.store(plan.cache_key, output)
    except LmiBuildError as error:
        current().warn(f"could not store the artifact in the shared cache {remote.root}: {error.message}")


def _from_remote_cache(remote: RemoteBuildCache, plan: BuildPlan, output: Path,
                       settings: BuildSettings) -> BuildOutcome | None:
    """A verified entry of the shared cache, pulled (every file verified again) into ``output``."""
    started = time.monotonic()
    entry = remote.lookup(plan.cache_key)
    if entry is None:
        return None
    check_output(output, settings.overwrite)
    staging = make_temp_dir(output, "cache")
    try:
        try:
            pull(entry.url, staging / "artifact", endpoint_url=settings.endpoint_url)
        except LmiBuildError as error:
            # A damaged or tampered shared entry is a miss: build afresh (and store a good entry).
            current().warn(f"the shared cache entry {entry.url} is unusable ({error.message}); building afresh")
            return None
        install_directory(staging / "artifact", output, overwrite=settings.overwrite)
        events.emit("cache_hit", cache="shared", key=plan.cache_key, where=entry.url)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _cached_outcome(plan, output, "pulled from the shared cache, verified", started,
                           message=f"reused the shared cache entry {entry.url} (verified)")


def _cached_outcome(plan: BuildPlan, output: Path, detail: str, started: float, message: str) -> BuildOutcome:
    """A cache hit: the step that ran now is the cache's; the original build's steps (and when it
    ran) are reported as that build's, from the artifact's manifest."""
    manifest = load_manifest(output)
    now = StepTiming(name="cache", seconds=round(time.monotonic() - started, 3), detail=detail)
    return BuildOutcome(plan=plan, status="cached", output=output, steps=[now], message=message,
                        original_steps=list(manifest.steps), original_built_at=manifest.created_at.isoformat())


def _check_publish_target(settings: BuildSettings) -> None:
    """A wrong bucket, endpoint or missing credentials must fail before the build, not after it."""
    assert settings.publish is not None
    target = parse_s3_url(settings.publish)
    client = s3_client(settings.endpoint_url)
    check_bucket(client, target, endpoint_label(settings.endpoint_url))
    check_writable(client, target, endpoint_label(settings.endpoint_url))


def _maybe_publish(outcome: BuildOutcome, settings: BuildSettings,
                   remote: RemoteBuildCache | None = None) -> BuildOutcome:
    if settings.publish is None:
        return outcome
    if outcome.stand_in:
        raise UnsupportedTarget("refusing to publish an artifact built from STAND-IN compiler output",
                                hint=f"build with the real {outcome.plan.target} toolchain")
    entry = remote.lookup(outcome.plan.cache_key) if remote is not None else None
    if remote is not None and entry is not None:  # in the shared cache: copy server-side, upload nothing
        copied = remote.copy_to(entry, settings.publish, overwrite=settings.overwrite)
        outcome.published = {"url": settings.publish, "copied_from": entry.url, "objects": copied}
        return outcome
    summary = publish(outcome.output, settings.publish, endpoint_url=settings.endpoint_url,
                      overwrite=settings.overwrite)
    outcome.published = {"url": settings.publish, **summary.model_dump(mode="json")}
    return outcome


def _steps_of(artifact: Path) -> list[StepTiming]:
    return list(load_manifest(artifact).steps)
