"""verify for Neuron artifacts: the neuronx-tnx structure, VERSION and the flags string against the
serving profile, the neuron block against serving.properties; mismatches name both sides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.manifest import load_manifest
from lmi_build.artifact.verify import check_compatibility, serving_target
from lmi_build.options.properties import read_properties
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.cache_tree import check_tree, remove_unusable
from lmi_build.targets.neuronx.layouts import TnxPrecompiledLayout, _block_vs_properties
from tests.cli_process import run_lmi_build
from tests.fixtures_neuronx import write_neuron_model

P030, P033 = "lmi-0.30.0-neuronx-sdk2.20.1", "lmi-0.33.0-neuronx-sdk2.21.1"


def _build(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "out"
    model = write_neuron_model(tmp_path / "llama")
    result = run_lmi_build("neuronx", "--model", str(model), "--tp", "2", "--n-positions", "2048",
                                      *extra, "--output", str(out), "--quiet")
    assert result.returncode == 0, (result.stdout + result.stderr)
    return out


def _codes(artifact: Path, container: str) -> dict[str, str]:
    manifest = load_manifest(artifact)
    errors, _ = check_compatibility(manifest, TARGETS["neuronx"], serving_target(TARGETS, container=container))
    return {e.code: e.message for e in errors}


def test_serving_profile_versions_and_flags(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    artifact = _build(tmp_path)
    assert set(_codes(artifact, P030)) == {"stand_in"}  # flags and neuronx-cc are the container's
    other = _codes(artifact, P033)
    assert other["version_neuronx_cc"] == ("artifact built with neuronx-cc 2.15.141.0, container "
                                           f"{P033} has 2.16.372.0")


def test_optimize_level_flags_match_the_container_that_reads_the_same_properties(
        tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    artifact = _build(tmp_path, "--option", "option.neuron_optimize_level=3")
    assert "option.neuron_optimize_level=3" in (artifact / "serving.properties").read_text()
    assert " -O3 " in load_manifest(artifact).plan["build"]["compiler_flags"]
    assert "compiler_flags" not in _codes(artifact, P030)


def test_flags_from_another_env_are_named_both_sides(tmp_path: Path, neuron_standin: Callable[..., None],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    neuron_standin()
    monkeypatch.setenv("NEURON_CC_FLAGS", "-O1")
    artifact = _build(tmp_path)
    manifest = load_manifest(artifact)
    errors, warnings = check_compatibility(manifest, TARGETS["neuronx"], serving_target(TARGETS, container=P030))
    # Precompiled NEFFs are found by HLO hash alone (finding 3): they load, so this is a warning only.
    assert "compiler_flags" not in {e.code for e in errors}
    message = {w.code: w.message for w in warnings}["compiler_flags"]
    assert "'-O1 --model-type=transformer --auto-cast=none'" in message
    assert "'--logfile /tmp/compile.log --temp-dir=/tmp --model-type=transformer --auto-cast=none'" in message


def test_structure_checks(tmp_path: Path, neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    artifact = _build(tmp_path)
    layout = TnxPrecompiledLayout()
    assert layout.check(artifact) == []
    properties = artifact / "serving.properties"
    properties.write_text(properties.read_text().replace("option.n_positions=2048", "option.n_positions=4096"))
    messages = [p.message for p in layout.check(artifact)]
    assert messages == ["neuron block sequence_length=2048, serving.properties option.n_positions=4096"]
    next(iter((artifact / "compiled").glob("*.neff"))).rename(artifact / "compiled" / "model.neff")
    assert any(p.code == "neuron_neff_name" for p in layout.check(artifact))
    config = json.loads((artifact / "config.json").read_text())
    del config["neuron"]
    (artifact / "config.json").write_text(json.dumps(config))
    assert any(p.code == "neuron_block" for p in layout.check(artifact))
    (artifact / "compiled" / "VERSION").unlink()
    assert any(p.code == "neuron_version" for p in layout.check(artifact))


def test_cache_tree_entries(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    good = root / "neuronxcc-2.15.141.0" / "MODULE_0123456789abcdef0123+ede6753c"
    failed = root / "neuronxcc-2.15.141.0" / "MODULE_ffffffffffffffffffff+ede6753c"
    locked = root / "neuronxcc-2.15.141.0" / "MODULE_eeeeeeeeeeeeeeeeeeee+ede6753c"
    for entry in (good, failed, locked):
        entry.mkdir(parents=True)
    (good / "model.neff").write_bytes(b"x")
    (good / "model.done").write_bytes(b"")
    (failed / "model.log").write_text("error")
    (locked / "model.neff").write_bytes(b"x")
    (locked / "model.done").write_bytes(b"")
    (locked / "model.hlo_module.pb.lock").write_bytes(b"")
    problems = dict(check_tree(root))
    assert set(problems) == {f"neuronxcc-2.15.141.0/{failed.name}", f"neuronxcc-2.15.141.0/{locked.name}"}
    assert remove_unusable(root) == sorted(problems)
    assert check_tree(root) == [] and good.is_dir()
    assert check_tree(tmp_path / "empty") == [("empty", "no neuronxcc-*/MODULE_* entries")]


def test_stand_in_artifact_is_inspectable_but_never_published(tmp_path: Path,
                                                                neuron_standin: Callable[..., None]) -> None:
    neuron_standin()
    artifact = _build(tmp_path)
    inspected = run_lmi_build("inspect", str(artifact), "--json")
    assert inspected.returncode == 0, (inspected.stdout + inspected.stderr)
    assert '"neuronx-tnx"' in inspected.stdout and "2.15.141.0" in inspected.stdout
    from lmi_build.core.errors import PublishError
    from lmi_build.storage.publish import publish

    with pytest.raises(PublishError, match="STAND-IN"):
        publish(artifact, "s3://bucket/never")  # refused before any S3 call


def _without_rolling_batch(properties: str) -> str:
    """An artifact's serving.properties as lmi-build wrote it before issue 21: no option.rolling_batch,
    no top-level batch_size, option.max_rolling_batch_size=32 beside option.batch_size=1."""
    kept = [line for line in properties.splitlines()
            if not line.startswith(("option.rolling_batch=", "batch_size="))]
    return "\n".join([*kept, "option.max_rolling_batch_size=32"]) + "\n"


def test_verify_reads_an_unset_rolling_batch_as_the_container_does(tmp_path: Path,
                                                                   neuron_standin: Callable[..., None]) -> None:
    """Finding 3: 0.30+ resolves a missing option.rolling_batch to auto, so the static NEFFs (batch 1)
    are served under rolling batch with batch 32 (vllm from 12): verify must not read it as disabled."""
    neuron_standin()
    artifact = _build(tmp_path)
    layout = TnxPrecompiledLayout()
    assert layout.check(artifact) == []
    properties = artifact / "serving.properties"
    properties.write_text(_without_rolling_batch(properties.read_text()))
    problems = {p.code: p.message for p in layout.check(artifact)}
    assert "neuron_batching" in problems, problems
    assert "option.max_rolling_batch_size=32" in problems["neuron_batching"]
    assert "0.30.0" in problems["neuron_batching"] and "0.34.0" in problems["neuron_batching"]
    # The same serving.properties, read by one serving release (verify --for-container).
    manifest = load_manifest(artifact)
    old = manifest.model_copy(update={"serving_properties": read_properties(properties)})
    errors, _ = check_compatibility(old, TARGETS["neuronx"], serving_target(TARGETS, container=P030))
    batching = [e.message for e in errors if e.code == "neuron_batching"]
    assert batching and batching[0].startswith(f"{P030}: ") and "resolves to vllm" in batching[0]
    errors, _ = check_compatibility(manifest, TARGETS["neuronx"], serving_target(TARGETS, container=P030))
    assert "neuron_batching" not in {e.code for e in errors}


def test_an_unset_rolling_batch_is_static_where_the_release_says_so() -> None:
    """0.28/0.29 (neuronx-legacy) read an unset option.rolling_batch as disable; 0.30+ (neuronx-tnx) as auto."""
    block = {"batch_size": 1, "num_cores": 2, "sequence_length": 2048}
    properties = {"engine": "Python", "option.tensor_parallel_degree": "2", "option.n_positions": "2048",
                  "option.batch_size": "1"}
    assert _block_vs_properties(block, properties, "neuronx-legacy") == []
    assert [p.code for p in _block_vs_properties(block, properties, "neuronx-tnx")] == ["neuron_batching"]
    # Finding 6: NEFFs for batch 4 served one request at a time.
    static = {**properties, "option.rolling_batch": "disable", "option.batch_size": "4"}
    problems = _block_vs_properties({**block, "batch_size": 4}, static, "neuronx-tnx")
    assert len(problems) == 1 and "DJL hands the model 1 request(s) at once" in problems[0].message
    assert _block_vs_properties({**block, "batch_size": 4}, {**static, "batch_size": "4"}, "neuronx-tnx") == []


def test_the_releases_that_refuse_the_keys_outright_are_not_claimed_unless_every_one_does() -> None:
    """The optimum export is read by every release; those whose DJL refuses its serving.properties at
    start-up (0.28-0.32: MPI mode for lmi-dist) are not the artifact's, and ``verify --for-container``
    names their refusal. Keys every release of the layout refuses still fail the layout check."""
    block = {"batch_size": 4, "num_cores": 2, "sequence_length": 128}
    base = {"engine": "Python", "option.tensor_parallel_degree": "2", "option.n_positions": "128",
            "option.max_rolling_batch_size": "4"}
    assert _block_vs_properties(block, {**base, "option.rolling_batch": "lmi-dist"}, "neuronx-optimum") == []
    refused = {**base, "option.rolling_batch": "tnx", "option.batch_size": "4"}
    problems = _block_vs_properties(block, refused, "neuronx-tnx")
    assert [p.code for p in problems] == ["neuron_batching"]
    assert "option.batch_size=4 with rolling batch" in problems[0].message and "0.30.0" in problems[0].message
