"""An offline Hugging Face cache laid out exactly like huggingface_hub's own:
``models--org--name/{refs/main, blobs/<hash>, snapshots/<commit>/<file> -> ../../blobs/<hash>}``.
Blob names are the files' hashes (sha256 for LFS files, git blob sha1 for the others)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".msgpack", ".h5")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def blob_hash(name: str, data: bytes) -> str:
    """What the cache names the blob (and what the Hub reports): sha256 for LFS, git sha1 otherwise."""
    return hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_blob_sha1(data)


@dataclass
class OfflineHub:
    home: Path  # HF_HOME
    repos: dict[str, str] = field(default_factory=dict)  # repo id -> commit of refs/main

    @property
    def cache(self) -> Path:
        return self.home / "hub"

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, commit: str | None = None,
                 branch: str = "main") -> str:
        commit = commit or hashlib.sha1(repo_id.encode() + json.dumps(sorted(files)).encode(),
                                        usedforsecurity=False).hexdigest()
        repo = self.cache / ("models--" + repo_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / branch).write_text(commit, encoding="utf-8")
        snapshot = repo / "snapshots" / commit
        for name, data in files.items():
            blob = repo / "blobs" / blob_hash(name, data)
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = snapshot / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
        self.repos[repo_id] = commit
        return commit


def tiny_model_files(*, pickle_too: bool = False, with_weights: bool = True) -> dict[str, bytes]:
    """A small but real model repo: a demo config, a real safetensors file, tokenizer config."""
    import numpy as np
    from safetensors.numpy import save

    from lmi_build.sources.demo import config_json, generation_config_json

    files = {
        "config.json": json.dumps(config_json("tiny-llama"), indent=2).encode(),
        "generation_config.json": json.dumps(generation_config_json("tiny-llama")).encode(),
        "tokenizer_config.json": b'{"tokenizer_class": "PreTrainedTokenizerFast"}',
        "README.md": b"# tiny\n",
        "original/consolidated.00.pth": b"not needed by a build",
        "model.gguf": b"another format",
    }
    if with_weights:
        weights = {"lm_head.weight": np.arange(64, dtype=np.float16).reshape(8, 8)}
        files["model.safetensors"] = save(weights)
    if pickle_too:
        files["pytorch_model.bin"] = b"\x80\x04pickle-bytes"
    return files


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OfflineHub:
    """An empty offline hub cache; HF_HOME points at it and HF_HUB_OFFLINE=1 for this test.

    huggingface_hub reads its environment once, when it is imported (as lmi-build does, through
    ``huggingface_hub.constants``); in this already-running process the constants are set to what
    a fresh process would read from this environment, and the environment itself for subprocesses."""
    from huggingface_hub import constants

    hub = OfflineHub(home=tmp_path / "hf-home")
    hub.cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(hub.home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(hub.home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub.cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub
