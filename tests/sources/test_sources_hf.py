"""Hugging Face sources through an offline cache laid out like huggingface_hub's own."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from lmi_build.core.errors import SourceError
from lmi_build.core.hashing import tree_digest
from lmi_build.reporting.output import Mode, set_mode
from lmi_build.sources.hf import _hub_error
from lmi_build.sources.resolve import resolve_source
from tests.cli_process import run_lmi_build_process
from tests.fixtures_hub import OfflineHub, blob_hash, tiny_model_files


def test_offline_revision_and_digest_come_from_the_cache(offline_hub: OfflineHub) -> None:
    files = tiny_model_files(pickle_too=True)
    commit = offline_hub.add_repo("acme/tiny-llama", files)
    source = resolve_source("acme/tiny-llama", purpose="build")
    assert source.identity.kind == "hf" and source.identity.id == "acme/tiny-llama"
    assert source.identity.revision == commit
    build_files = ["config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]
    kinds = {"model.safetensors": "sha256"}
    expected = tree_digest((rel, f"{kinds.get(rel, 'gitsha1')}:{blob_hash(rel, files[rel])}") for rel in build_files)
    assert source.identity.digest == expected
    assert (source.path / "model.safetensors").read_bytes() == files["model.safetensors"]
    # A plan resolves the same identity; explicit and inline revisions pin the same commit.
    assert resolve_source("acme/tiny-llama", purpose="plan").identity == source.identity
    assert resolve_source(f"acme/tiny-llama@{commit}", purpose="plan").identity == source.identity
    assert resolve_source("acme/tiny-llama", purpose="plan", revision=commit).identity == source.identity


def test_branch_revision_and_conflicts(offline_hub: OfflineHub) -> None:
    main = offline_hub.add_repo("acme/m", tiny_model_files())
    files = tiny_model_files()
    files["config.json"] = files["config.json"].replace(b'"num_hidden_layers": 4', b'"num_hidden_layers": 2')
    dev = offline_hub.add_repo("acme/m", files, commit="d" * 40, branch="dev")
    assert resolve_source("acme/m@dev", purpose="plan").identity.revision == dev
    assert resolve_source("acme/m", purpose="plan").identity.revision == main
    assert resolve_source("acme/m@dev", purpose="plan").identity.digest != resolve_source(
        "acme/m", purpose="plan").identity.digest
    with pytest.raises(SourceError, match="two revisions"):
        resolve_source("acme/m@dev", purpose="plan", revision="main")


def test_pickle_only_repo_is_refused(offline_hub: OfflineHub) -> None:
    offline_hub.add_repo("acme/old", tiny_model_files(pickle_too=True, with_weights=False))
    with pytest.raises(SourceError, match="only pickle weights"):
        resolve_source("acme/old", purpose="build")
    assert resolve_source("acme/old", purpose="build", allow_pickle=True).identity.digest


def test_missing_from_offline_cache(offline_hub: OfflineHub) -> None:
    with pytest.raises(SourceError, match="not in the local cache") as caught:
        resolve_source("acme/absent", purpose="plan")
    assert "HF_HUB_OFFLINE" in caught.value.one_line()


def test_the_cli_reads_the_hub_settings_from_its_environment(offline_hub: OfflineHub) -> None:
    """A fresh process: huggingface_hub's constants come from HF_HOME/HF_HUB_OFFLINE at import."""
    commit = offline_hub.add_repo("acme/tiny-llama", {**tiny_model_files(), "tokenizer.json": b"{}"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPTION_", "SM_"))}
    result = run_lmi_build_process("plan", "hf", "--model", "acme/tiny-llama", "--json", env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["model"]["revision"] == commit


@pytest.fixture
def progress_bars() -> Iterator[None]:
    from huggingface_hub.utils import enable_progress_bars

    enable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()
        set_mode(Mode.HUMAN)


@pytest.mark.parametrize(("mode", "bars_off"), [(Mode.HUMAN, False), (Mode.JSON, True), (Mode.QUIET, True)])
def test_hub_progress_bars_are_off_in_json_and_quiet_mode(offline_hub: OfflineHub, progress_bars: None,
                                                          mode: Mode, bars_off: bool) -> None:
    from huggingface_hub.utils import are_progress_bars_disabled

    offline_hub.add_repo("acme/tiny-llama", tiny_model_files())
    set_mode(mode)
    resolve_source("acme/tiny-llama", purpose="plan")
    assert are_progress_bars_disabled() is bars_off


def test_an_unreachable_hub_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hf-mirror.example")
    error = _hub_error(requests.ConnectionError("refused"), "acme/m", None)
    assert error is not None
    assert error.one_line().startswith("cannot reach the Hugging Face Hub at https://hf-mirror.example")
