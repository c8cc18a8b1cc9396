"""Local model directories: identity, cached digest, selection, refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lmi_build.core.errors import SourceError
from lmi_build.core.hashing import sha256_file, tree_digest
from lmi_build.core.paths import cache_root
from lmi_build.sources.digest_cache import cache_file_for
from lmi_build.sources.resolve import resolve_source
from tests.fixtures_hub import tiny_model_files


def _model_dir(root: Path, **kwargs: bool) -> Path:
    for rel, data in tiny_model_files(**kwargs).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_identity_is_the_name_and_the_digest_of_build_files(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "my-llama", pickle_too=True)
    source = resolve_source(str(model), purpose="build")
    assert source.identity.kind == "local" and source.identity.id == "my-llama"
    assert str(tmp_path) not in source.identity.model_dump_json()
    # .bin next to safetensors, original/, gguf and README are not build inputs.
    expected = ["config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]
    assert source.identity.digest == tree_digest((rel, sha256_file(model / rel)) for rel in expected)
    assert resolve_source(str(model), purpose="plan").identity == source.identity


def test_second_run_reads_nothing_but_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model_dir(tmp_path / "m")
    first = resolve_source(str(model), purpose="build")
    cache = json.loads(cache_file_for(model.resolve()).read_text())
    assert cache["directory"] == str(model.resolve()) and "model.safetensors" in cache["files"]

    def no_hashing(paths: list[Path], **_: object) -> dict[Path, str]:
        raise AssertionError(f"re-hashed {paths}")

    import lmi_build.sources.digest_cache as digest_cache

    with monkeypatch.context() as patch:
        patch.setattr(digest_cache, "sha256_files", no_hashing)
        assert resolve_source(str(model), purpose="build").identity.digest == first.identity.digest


def test_the_digest_cache_keeps_one_small_file_per_directory_and_a_bounded_number(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: one file held every directory ever hashed, read, pruned by a stat per record and
    rewritten by every plan (the suite's plans slowed as it grew)."""
    import lmi_build.sources.digest_cache as digest_cache

    monkeypatch.setattr(digest_cache, "MAX_DIRECTORIES", 3)
    models = [_model_dir(tmp_path / f"m{index}") for index in range(5)]
    for model in models:
        resolve_source(str(model), purpose="build")
    kept = sorted(path.name for path in (cache_root() / digest_cache.CACHE_DIR).iterdir())
    assert kept == sorted(cache_file_for(model.resolve()).name for model in models[2:])
    assert not (cache_root() / "file-digests.json").exists()


def test_replaced_weights_with_the_same_size_and_mtime_are_hashed_again(tmp_path: Path) -> None:
    """A file replaced by one of the same size whose mtime was set back (cp --preserve, touch -r,
    an unpacked archive) is another model: its old digest must not be served."""
    model = _model_dir(tmp_path / "m")
    first = resolve_source(str(model), purpose="build")
    weights = model / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size and weights.stat().st_mtime_ns == stat.st_mtime_ns
    assert resolve_source(str(model), purpose="build").identity.digest != first.identity.digest


def test_pickle_only_is_refused_unless_allowed(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "old", pickle_too=True, with_weights=False)
    with pytest.raises(SourceError, match="pickle") as caught:
        resolve_source(str(model), purpose="build")
    assert "--allow-pickle" in caught.value.one_line()
    allowed = resolve_source(str(model), purpose="build", allow_pickle=True)
    assert allowed.identity.digest


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"), purpose="plan")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"no config\.json"):
        resolve_source(str(tmp_path / "empty"), purpose="plan")
    model = _model_dir(tmp_path / "noweights", with_weights=False)
    resolve_source(str(model), purpose="plan")
    with pytest.raises(SourceError, match="no weights"):
        resolve_source(str(model), purpose="build")
    with pytest.raises(SourceError, match="revisions apply only"):
        resolve_source(str(model), purpose="plan", revision="main")


def test_unrecognised_references() -> None:
    with pytest.raises(SourceError, match="unsupported model URL"):
        resolve_source("gs://bucket/model", purpose="plan")
    with pytest.raises(SourceError, match="neither an existing directory"):
        resolve_source("not a/valid id!", purpose="plan")
