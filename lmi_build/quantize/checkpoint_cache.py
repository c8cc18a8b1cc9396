"""The checkpoint cache: quantized/converted checkpoints kept under a key of exactly what decides them.

A checkpoint depends on the input weights, the quantization (method, knobs, calibration text
digest and sample choice), the format, tp/pp, the dtype and the exporter's versions: not on
engine knobs (max batch size, lengths), the container profile or serving options. So another
profile, a rerun, or an engine-only rebuild with new engine knobs finds the same key and skips the
calibration. Entries are hard links (no extra disk on one filesystem) plus ``entry.json`` with
the key, the step's result and every file's size and SHA-256; a restore re-hashes every file
first (as the artifact cache does) and evicts a corrupted entry instead of handing it out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmi_build.artifact.files import FileEntry, list_files, verify_entries
from lmi_build.core.fs import atomic_write_json, freeze_shared, link_tree, staged_directory
from lmi_build.core.paths import cache_root
from lmi_build.core.reading import read_json_file
from lmi_build.core.types import FrozenModel
from lmi_build.core.versions import installed_versions
from lmi_build.planning.context import read_text
from lmi_build.planning.options import CommonOptions
from lmi_build.planning.plan import BuildPlan
from lmi_build.quantize.result import CheckpointResult
from lmi_build.reporting.output import current

if TYPE_CHECKING:
    from lmi_build.quantize.placement import Placement

KEY_VERSION = 1
ENTRY_NAME = "entry.json"
CHECKPOINT_DIR = "checkpoint"
# Packages whose versions decide the exported bytes (read from metadata: nothing is imported).
EXPORTER_PACKAGES = ("nvidia-modelopt", "transformers", "torch", "safetensors", "accelerate")
# The input files a checkpoint is made from; tokenizer files are carried by the packager instead.
_INPUT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
                   "*.py")  # *.py: remote code (trust_remote_code) changes the model too


class CacheEntry(FrozenModel):
    key: str
    material: dict[str, Any]  # what was hashed, for humans reading the cache
    result: dict[str, Any]  # CheckpointResult as JSON (out_dir is rewritten on restore)
    files: list[FileEntry]


def checkpoint_key(plan: BuildPlan, model_dir: Path, checkpoint_format: str, shaping: dict[str, Any], *,
                   calibrated_on: Placement | None = None) -> tuple[str, dict[str, Any]]:
    """The key and the material it hashes: model identity and input-file fingerprint, format,
    quantization (with its calibration plan), where calibration runs (device and dtype, not the GPU
    count: the same numbers on one GPU or spread over several), the build fields that shape the
    checkpoint (``shaping``, given by the target), versions."""
    material: dict[str, Any] = {
        "key_version": KEY_VERSION,
        "model": plan.model.model_dump(mode="json"),
        "inputs": input_fingerprint(model_dir),
        "format": checkpoint_format,
        "quantization": plan.quantization.model_dump(mode="json"),
        "build": shaping,
        "calibrated_on": None if calibrated_on is None else {"device": calibrated_on.device,
                                                             "load_dtype": calibrated_on.load_dtype},
        "trust_remote_code": read_text(plan.options, CommonOptions).trust_remote_code or "false",
        "versions": installed_versions(EXPORTER_PACKAGES),
    }
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest(), material


def input_fingerprint(model_dir: Path) -> list[list[Any]]:
    """Name, size, inode, modification and change time of every input file: a changed or replaced weight file
    changes the key without hashing gigabytes on every build (the cached OUTPUT is hashed)."""
    seen: dict[str, list[Any]] = {}
    for pattern in _INPUT_PATTERNS:
        for path in model_dir.glob(pattern):
            if path.is_file():
                stat = path.stat()
                # ctime and inode too: a replaced file can keep its size and mtime, never its ctime.
                seen[path.name] = [path.name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
    return [seen[name] for name in sorted(seen)]


class CheckpointCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root() / "checkpoints"

    def entry_dir(self, key: str) -> Path:
        algorithm, _, digest = key.partition(":")
        if algorithm != "sha256" or len(digest) != 64:
            raise ValueError(f"malformed checkpoint key {key!r}")
        return self.root / digest

    def restore(self, key: str, out_dir: Path) -> CheckpointResult | None:
        """The cached checkpoint linked into ``out_dir`` (replaced only once the entry verified),
        with its original result; None on a miss or a corrupted entry (evicted, reported)."""
        entry_dir = self.entry_dir(key)
        entry = self._read_entry(entry_dir)
        if entry is None:
            return None
        problems = verify_entries(entry_dir / CHECKPOINT_DIR, entry.files)
        if entry.key != key or problems:
            reason = f"{problems[0].entry.path}: {problems[0].kind}" if problems else "another key"
            current().warn(f"evicting a corrupted checkpoint cache entry ({reason}); quantizing afresh")
            shutil.rmtree(entry_dir, ignore_errors=True)
            return None
        with staged_directory(out_dir) as staging:
            link_tree(entry_dir / CHECKPOINT_DIR, staging)
            freeze_shared(staging)
        result = CheckpointResult.model_validate({**entry.result, "out_dir": str(out_dir)})
        return result.model_copy(update={"cached": True, "notes": [
            *result.notes, f"reused the cached checkpoint {key[:19]}… (verified)"]})

    def store(self, key: str, material: dict[str, Any], result: CheckpointResult) -> Path | None:
        """Keep ``result.out_dir`` under ``key``; a cache that cannot be written never fails the step."""
        final = self.entry_dir(key)
        if final.exists():
            return final
        try:
            with staged_directory(final, keep_existing=True) as staging:
                link_tree(result.out_dir, staging / CHECKPOINT_DIR, share_writable=False)
                freeze_shared(staging)
                entry = CacheEntry(key=key, material=material, result=result.model_dump(mode="json"),
                                   files=list_files(staging / CHECKPOINT_DIR))
                atomic_write_json(staging / ENTRY_NAME, entry.model_dump(mode="json"), indent=1)
        except OSError as error:
            current().warn(f"could not store the checkpoint in the cache {self.root}: {error.strerror or error}")
            return None
        return final

    @staticmethod
    def _read_entry(entry_dir: Path) -> CacheEntry | None:
        path = entry_dir / ENTRY_NAME
        if not path.is_file():
            if entry_dir.exists():  # a half-written entry cannot exist (staged), but a damaged one can
                shutil.rmtree(entry_dir, ignore_errors=True)
            return None
        try:
            return CacheEntry.model_validate(read_json_file(path, what="checkpoint cache entry"))
        except ValueError:
            shutil.rmtree(entry_dir, ignore_errors=True)
            return None
