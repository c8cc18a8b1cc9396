"""The config-aware artifact cache: finished artifacts kept under their plan's cache key.

The key hashes the model identity, recipe, every build-relevant option and the toolchain (see
``planning.cache_key``), so a changed dtype, quantization or max length never reuses a stale
engine (the DJL container's JIT cache keys on model id + tp only). Entries share only large,
read-only payloads with the artifacts (copy-on-write clones or copies for everything else, see
``fs.link_or_copy``), so no edit of an output reaches the entry, and every restore re-verifies the
SHA-256 of every file before it is handed out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lmi_build.artifact.manifest import load_manifest
from lmi_build.artifact.packager import check_output
from lmi_build.artifact.target_api import TargetsByName
from lmi_build.artifact.verify import verify_local
from lmi_build.core.errors import VerifyError
from lmi_build.core.fs import freeze_shared, link_tree, staged_directory
from lmi_build.core.paths import cache_root
from lmi_build.reporting.output import current


class ArtifactCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root() / "artifacts"

    def entry(self, cache_key: str) -> Path:
        algorithm, _, digest = cache_key.partition(":")
        if algorithm != "sha256" or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise VerifyError(f"malformed cache key {cache_key!r}", hint="this is a bug in the planner")
        return self.root / digest

    def store(self, cache_key: str, artifact: Path) -> Path | None:
        """Keep ``artifact`` under ``cache_key`` (no-op when an entry exists already)."""
        final = self.entry(cache_key)
        if final.exists():
            return final
        try:
            # An entry another process stored meanwhile has the same content: it is kept.
            with staged_directory(final, keep_existing=True) as staging:
                # Only read-only payloads are shared with the artifact; whatever a user could
                # still edit (a file linked from their model) is copied into the entry.
                link_tree(artifact, staging, share_writable=False)
                freeze_shared(staging)
        except OSError as error:
            # A cache that cannot be written must never fail the build that produced the artifact.
            current().warn(f"could not store the artifact in the cache {self.root}: {error.strerror or error}")
            return None
        return final

    def restore(self, cache_key: str, output: Path, targets: TargetsByName, *, overwrite: bool = False) -> Path | None:
        """Copy (hard-link) the cached artifact to ``output`` after verifying it (by its target in
        ``targets``); None on a miss. A corrupted entry is evicted and reported, and the caller builds afresh."""
        entry = self.entry(cache_key)
        if not entry.is_dir():
            return None
        report = verify_local(entry, targets)
        key_matches = report.valid and load_manifest(entry).cache_key == cache_key
        if not key_matches:
            reason = report.errors[0].message if report.errors else "its manifest has another cache key"
            current().warn(f"evicting a corrupted cache entry ({reason}); building afresh")
            shutil.rmtree(entry, ignore_errors=True)
            return None
        output = output.absolute()
        check_output(output, overwrite)  # before linking, not after
        with staged_directory(output, commits_output=True) as staging:
            link_tree(entry, staging)
            freeze_shared(staging)
        return output
