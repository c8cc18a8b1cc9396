"""Assemble an artifact: layout files, ``serving.properties``, manifest, verify, then rename.

Everything is built in a staging directory beside ``output_dir`` (same filesystem, so files can be
hard-linked and the final step is one atomic rename). Nothing at ``output_dir`` is touched until the
staged artifact has passed verification; a previous artifact is moved aside and removed only after
the new one is in place.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping
from pathlib import Path

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.hygiene import is_secret_key, secret_values
from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import (
    BUILD_ONLY_KEYS,
    BuildRecord,
    StepTiming,
    build_manifest,
    write_manifest,
)
from lmi_build.artifact.target_api import ArtifactTarget
from lmi_build.artifact.verify import verify_local
from lmi_build.core.errors import InvalidPlan, LmiBuildError, OptionError, VerifyError
from lmi_build.core.fs import (
    freeze_shared,
    inodes,
    link_mode,
    link_or_copy,
    make_readable,
    replace_directory,
    staged_directory,
    users_files,
)
from lmi_build.options.properties import write_properties
from lmi_build.options.resolve import option_spec
from lmi_build.planning.context import read_written
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import BuildPlan
from lmi_build.reporting import events

PROPERTIES_NAME = "serving.properties"

# Files carried from the source model next to the produced ones (tokenizer, chat, generation).
CARRIED_PATTERNS = (
    "tokenizer*", "vocab*", "merges.txt", "*.model", "*.tiktoken", "added_tokens.json",
    "special_tokens_map.json", "generation_config.json", "chat_template.json", "*.jinja",
    "preprocessor_config.json",
)
REMOTE_CODE_PATTERNS = ("*.py",)


def matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def carry_source_files(source_dir: Path, staging: Path, *, trust_remote_code: bool) -> list[str]:
    """Carry the source model's tokenizer, chat-template, generation-config (and, only with
    ``trust_remote_code``, custom ``*.py``) files into ``staging``. Top level only; a file the
    layout already placed (a produced ``config.json``, ...) is never overwritten. ``config.json``
    itself is never carried: whether it belongs in the artifact is the layout's decision.
    Returns the names carried."""
    patterns = CARRIED_PATTERNS + (REMOTE_CODE_PATTERNS if trust_remote_code else ())
    carried: list[str] = []
    if not source_dir.is_dir():
        return carried
    for entry in sorted(source_dir.iterdir(), key=lambda p: p.name):
        if entry.name == "config.json" or not entry.is_file() or not matches_any(entry.name, patterns):
            continue
        target = staging / entry.name
        if target.exists():
            continue
        link_or_copy(entry, target)
        carried.append(entry.name)
    return carried


def trust_remote_code(plan: BuildPlan) -> bool:
    return bool(read_written(plan.options, CommonOptions).trust_remote_code)


def _property_order(key: str) -> tuple[int, str]:
    # engine first, other top-level keys next, then option.* alphabetically: diffs stay small.
    return (0 if key == "engine" else 2 if key.startswith("option.") else 1, key)


def serving_properties(plan: BuildPlan, layout: Layout) -> dict[str, str]:
    """The artifact's serving.properties: the plan's options minus build-only keys, plus what the
    layout needs (the layout wins), in a stable order. Refuses credentials.

    Runtime-only values that merely restate the option table's default are left out: the serving
    container applies its own release's defaults to those, and pinning ours could change them.
    Build-relevant values are always written, because they describe what was compiled."""
    values = written_properties(plan.options, plan.option_sources, plan.target)
    values.update(layout.properties(plan))
    secrets = secret_values()
    for key, value in values.items():
        if is_secret_key(key) or any(secret in value for secret in secrets):
            raise OptionError(
                f"'{key}' would write a credential into the artifact's serving.properties",
                hint="pass credentials to the serving container as environment variables, not options",
            )
    return {key: values[key] for key in sorted(values, key=_property_order)}


def written_properties(options: Mapping[str, str], sources: Mapping[str, str], target: str) -> dict[str, str]:
    """The plan's options that serving.properties carries (before the layout's own keys): a target's
    plan evaluates its container's start-up on the same keys before the plan exists."""
    return {k: v for k, v in options.items() if k not in BUILD_ONLY_KEYS and not _left_out(target, sources, k)}


def _left_out(target: str, sources: Mapping[str, str], key: str) -> bool:
    """lmi-build's own build knobs, and runtime-only values that restate the table's default."""
    spec = option_spec(key)
    if spec is None:
        return False
    if spec.is_build_only(target):
        return True
    return sources.get(key) == "default" and not spec.build_relevant


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def check_output(output_dir: Path, overwrite: bool) -> None:
    if output_dir.is_symlink() or (output_dir.exists() and not output_dir.is_dir()):
        raise LmiBuildError(f"output {output_dir} exists and is not a directory",
                            hint="choose another --output path", code="output_exists")
    if output_dir.is_dir() and not _is_empty_dir(output_dir) and not overwrite:
        raise LmiBuildError(f"output directory {output_dir} is not empty",
                            hint="pass --overwrite to replace it, or choose another --output",
                            code="output_exists")


def install_directory(staged: Path, output_dir: Path, *, overwrite: bool = False) -> Path:
    """Rename a finished directory (on the same filesystem) to ``output_dir`` with the packager's
    rules: a non-empty output is refused unless ``overwrite``; the old one goes only after success."""
    output_dir = output_dir.absolute()
    check_output(output_dir, overwrite)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    replace_directory(staged, output_dir, commits_output=True)
    return output_dir


def package(
    plan: BuildPlan,
    *,
    target: ArtifactTarget,
    layout: Layout,
    produced: Path,
    source_dir: Path,
    output_dir: Path,
    record: BuildRecord,
    overwrite: bool = False,
    copy: bool = False,
    users_roots: tuple[Path, ...] = (),
) -> Path:
    """Build the artifact of ``plan`` at ``output_dir`` and return its path.

    ``produced``: what the build steps wrote (engine dir, checkpoint); ``source_dir``: the source
    model (tokenizer etc. are carried from it). ``copy=True`` forces copies instead of hard links.
    ``users_roots``: other directories of the user's that the build read from (``--engine-dir``,
    ``--checkpoint``): like the source, never hard-linked while writable and never changed.
    ``target``: the plan's target (its layout checks and serving rules verify the staged artifact).
    """
    if not plan.valid:
        raise InvalidPlan("the plan has errors; refusing to package",
                          hint="run `lmi-build plan` to see them")
    chosen = layout
    output_dir = output_dir.absolute()
    check_output(output_dir, overwrite)
    # The staged artifact replaces output_dir only after it passed verification (see fs.staged_directory).
    with events.step("package", detail=f"layout {layout.name}"), \
            staged_directory(output_dir, commits_output=True) as staging:
        start = time.perf_counter()
        # The user's files (the model, an --engine-dir or --checkpoint given): copied or cloned while
        # writable, and never changed (no mode bit of theirs is ours to set).
        source_inodes = inodes(source_dir).union(*(inodes(root) for root in users_roots))
        with link_mode("copy" if copy else "auto"), users_files(source_inodes):
            chosen.assemble(plan, produced, source_dir, staging)
        # Files the build produced (ModelOpt, transformers and vendor tools may write 0600) become
        # readable as the umask allows, so a serving user can read them; the user's are left alone.
        make_readable(staging, keep=source_inodes)
        # Payloads hard-linked from what the build produced become read-only: an edit through this
        # output can then never reach another output or the cache that later links the same inode.
        freeze_shared(staging, keep=source_inodes)
        properties = serving_properties(plan, chosen)
        if (staging / PROPERTIES_NAME).exists() or (staging / MANIFEST_NAME).exists():
            raise VerifyError(f"layout '{layout.name}' wrote {PROPERTIES_NAME} or {MANIFEST_NAME} itself",
                              hint="this is a bug in the layout: the packager writes these files")
        _write_properties(staging / PROPERTIES_NAME, properties)
        step = StepTiming(name="package", seconds=round(time.perf_counter() - start, 3),
                          detail=f"layout {layout.name}, {'copy' if copy else 'hard link or copy'}")
        packaged = record.model_copy(update={"steps": [*record.steps, step]})
        manifest = build_manifest(plan, layout=layout.name, record=packaged, artifact_dir=staging,
                                  serving_properties=properties, extra_roots=(produced, source_dir))
        write_manifest(staging, manifest, extra_roots=(produced, source_dir))
        _verify_staged(staging, target)
    return output_dir


def _write_properties(path: Path, values: dict[str, str]) -> None:
    write_properties(path, values)


def _verify_staged(staging: Path, target: ArtifactTarget) -> None:
    # The files were hashed moments ago to write the manifest; re-reading gigabytes would only
    # catch a concurrent writer, so the staged check compares sizes and runs the layout's checks.
    report = verify_local(staging, {target.name: target}, rehash=False, records=False)
    if not report.valid:
        first = report.errors[0]
        more = f" (+{len(report.errors) - 1} more)" if len(report.errors) > 1 else ""
        raise VerifyError(f"the staged artifact failed verification: {first.message}{more}",
                          hint=first.hint or "nothing was written to the output directory")
