"""Packaging an hf artifact: layout, serving.properties, manifest, carry rules, atomicity, hygiene."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.layout import Layout
from lmi_build.artifact.manifest import SCHEMA_PATH, load_manifest, manifest_schema
from lmi_build.artifact.packager import carry_source_files, package
from lmi_build.artifact.verify import verify_local
from lmi_build.core.errors import LmiBuildError, OptionError, StepError, VerifyError
from lmi_build.core.fs import link_or_copy
from lmi_build.core.types import ModelIdentity
from lmi_build.options.properties import read_properties
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.layouts import HfLayout
from tests.fixtures_artifact import (
    HF,
    HF_LAYOUT,
    TargetWithLayouts,
    make_plan,
    make_record,
    write_source_model,
)


def test_hf_artifact_end_to_end(hf_artifact: Path, source_model: Path) -> None:
    names = sorted(p.name for p in hf_artifact.iterdir())
    assert names == sorted([
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
        "generation_config.json", "chat_template.jinja", "serving.properties", MANIFEST_NAME,
    ])  # no README, no .bin, no custom code (trust_remote_code not set)
    properties = read_properties(hf_artifact / "serving.properties")
    assert properties["engine"] == "Python"
    assert "option.model_id" not in properties
    assert properties["option.tensor_parallel_degree"] == "1"
    text = (hf_artifact / "serving.properties").read_text()
    assert text.index("engine=") < text.index("option.dtype=") < text.index("option.tensor_parallel_degree=")

    manifest = load_manifest(hf_artifact)
    assert manifest.schema_version == 1 and manifest.layout == "hf" and manifest.target == "hf"
    assert manifest.source.id == "tiny-org/tiny-llama"
    assert [step.name for step in manifest.steps] == ["convert", "package"]
    assert manifest.environment.packages.get("safetensors")
    by_path = {entry.path: entry for entry in manifest.files}
    assert set(by_path) == set(names) - {MANIFEST_NAME}
    assert by_path["model.safetensors"].size == (source_model / "model.safetensors").stat().st_size
    assert manifest.total_bytes == sum(entry.size for entry in manifest.files)
    assert manifest.plan["options"]["option.model_id"] == "tiny-org/tiny-llama"
    assert manifest.serving_properties == properties

    report = verify_local(hf_artifact, TARGETS)
    assert report.valid, report.errors
    assert report.warnings == []
    # Small weights are copies (or copy-on-write clones): no edit of the artifact reaches the source.
    assert (hf_artifact / "model.safetensors").stat().st_ino != (source_model / "model.safetensors").stat().st_ino
    assert (hf_artifact / "model.safetensors").read_bytes() == (source_model / "model.safetensors").read_bytes()
    assert not any(p.is_symlink() for p in hf_artifact.rglob("*"))


def test_manifest_validates_against_checked_in_schema(hf_artifact: Path) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema == manifest_schema(), "regenerate with: python -m lmi_build.artifact.manifest"
    jsonschema.Draft202012Validator.check_schema(schema)
    document = json.loads((hf_artifact / MANIFEST_NAME).read_text())
    jsonschema.validate(document, schema)
    document["files"][0]["size"] = "big"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, schema)


def test_sharded_checkpoint_and_copy_mode(tmp_path: Path) -> None:
    source = write_source_model(tmp_path / "sharded", shards=3)
    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source, source_dir=source,
                  output_dir=tmp_path / "copied", record=make_record(), copy=True)
    assert (out / "model.safetensors.index.json").is_file()
    assert sorted(p.name for p in out.glob("*.safetensors")) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert (out / "model-00001-of-00003.safetensors").stat().st_ino != (source / "model-00001-of-00003.safetensors").stat().st_ino
    assert verify_local(out, TARGETS).valid


def test_artifact_and_its_files_get_the_users_umask_permissions(tmp_path: Path) -> None:
    """The staging directory comes from mkdtemp (0700) and the manifest from mkstemp (0600);
    what lands at --output must be readable like anything else the user writes."""
    source = write_source_model(tmp_path / "model")
    previous = os.umask(0o022)
    try:
        out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source, source_dir=source,
                      output_dir=tmp_path / "artifact", record=make_record())
    finally:
        os.umask(previous)
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)
    for name in (MANIFEST_NAME, "serving.properties"):
        assert oct((out / name).stat().st_mode & 0o777) == oct(0o644)


def test_no_host_paths_and_no_secrets_in_any_file(tmp_path: Path, source_model: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMIK7MDENGbPxRfiCYsecretkey")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    # A local source whose option.model_id is a host path: build-only, it must not reach the artifact.
    plan = make_plan("hf", model=ModelIdentity(kind="local", id="tiny-llama", digest="sha256:" + "c" * 64),
                     options={**make_plan().options, "option.model_id": str(source_model)})
    out = package(plan, target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                  output_dir=tmp_path / "out", record=make_record())
    forbidden = [str(tmp_path), str(Path.home()), str(work), str(source_model), "/tmp/",
                 "hf_secretvalue123", "wJalrXUtnFEMIK7MDENGbPxRfiCYsecretkey", "AKIAIOSFODNN7EXAMPLE"]
    for path in out.rglob("*"):
        data = path.read_bytes()
        for needle in forbidden:
            assert needle.encode() not in data, f"{needle} found in {path.name}"
    assert load_manifest(out).plan["options"]["option.model_id"] == "<local:tiny-llama>"


def test_option_carrying_a_secret_is_refused(tmp_path: Path, source_model: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    plan = make_plan("hf", options={**make_plan().options, "option.hub_auth": "Bearer hf_secretvalue123"})
    with pytest.raises(OptionError, match=r"option\.hub_auth"):
        package(plan, target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                output_dir=tmp_path / "out", record=make_record())
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.glob(".out.staging-*")) == []


def test_host_path_in_plan_is_refused_before_anything_is_written(tmp_path: Path, source_model: Path) -> None:
    plan = make_plan("hf", model=ModelIdentity(kind="local", id=str(source_model)))
    with pytest.raises(VerifyError, match=r"build-host paths at \.source\.id"):
        package(plan, target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                output_dir=tmp_path / "out", record=make_record())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


class _FailingLayout(HfLayout):
    name = "test-failing"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        super().assemble(plan, produced, source_dir, staging)
        raise StepError("layout exploded half way")


class _IncompleteLayout(HfLayout):
    """Assembles without a tokenizer: the staged verification must refuse it."""

    name = "test-incomplete"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        for name in ("config.json", "model.safetensors"):
            link_or_copy(produced / name, staging / name)


FAILING, INCOMPLETE = _FailingLayout(), _IncompleteLayout()
WITH_TEST_LAYOUTS = TargetWithLayouts(HF, (FAILING, INCOMPLETE))


@pytest.mark.parametrize(("layout", "error", "match"), [
    (FAILING, StepError, "exploded"),
    (INCOMPLETE, VerifyError, "staged artifact failed verification: no tokenizer"),
])
def test_failing_layout_leaves_nothing_behind(tmp_path: Path, source_model: Path, layout: Layout,
                                              error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        package(make_plan("hf"), target=WITH_TEST_LAYOUTS, layout=layout, produced=source_model, source_dir=source_model,
                output_dir=tmp_path / "out" / "artifact", record=make_record())
    assert list((tmp_path / "out").iterdir()) == []


def test_failing_rebuild_keeps_the_previous_artifact(hf_artifact: Path, source_model: Path) -> None:
    before = {p.name: p.read_bytes() for p in hf_artifact.iterdir()}
    with pytest.raises(StepError):
        package(make_plan("hf"), target=WITH_TEST_LAYOUTS, layout=FAILING, produced=source_model, source_dir=source_model,
                output_dir=hf_artifact, record=make_record(), overwrite=True)
    assert {p.name: p.read_bytes() for p in hf_artifact.iterdir()} == before
    assert sorted(p.name for p in hf_artifact.parent.iterdir()) == [hf_artifact.name]


def test_overwrite_refused_then_replaced(hf_artifact: Path, source_model: Path) -> None:
    (hf_artifact / "stale.txt").write_text("old")
    with pytest.raises(LmiBuildError, match="not empty") as caught:
        package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                output_dir=hf_artifact, record=make_record())
    assert "--overwrite" in (caught.value.hint or "")
    assert (hf_artifact / "stale.txt").exists()
    package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
            output_dir=hf_artifact, record=make_record(), overwrite=True)
    assert not (hf_artifact / "stale.txt").exists()
    assert verify_local(hf_artifact, TARGETS).valid
    assert sorted(p.name for p in hf_artifact.parent.iterdir()) == [hf_artifact.name]


def test_empty_output_dir_is_used(tmp_path: Path, source_model: Path) -> None:
    (tmp_path / "empty").mkdir()
    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                  output_dir=tmp_path / "empty", record=make_record())
    assert verify_local(out, TARGETS).valid


def test_custom_code_carried_only_with_trust_remote_code(tmp_path: Path, source_model: Path) -> None:
    without = tmp_path / "without"
    without.mkdir()
    carried = carry_source_files(source_model, without, trust_remote_code=False)
    assert not any(name.endswith(".py") for name in carried)
    assert {"tokenizer.json", "chat_template.jinja", "generation_config.json", "special_tokens_map.json"} <= set(carried)
    assert "config.json" not in carried and "README.md" not in carried and "pytorch_model.bin" not in carried

    with_code = tmp_path / "with"
    with_code.mkdir()
    carried = carry_source_files(source_model, with_code, trust_remote_code=True)
    assert {"modeling_tiny.py", "configuration_tiny.py"} <= set(carried)

    plan = make_plan("hf", options={**make_plan().options, "option.trust_remote_code": "true"})
    out = package(plan, target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                  output_dir=tmp_path / "artifact", record=make_record())
    assert (out / "modeling_tiny.py").is_file()
    assert read_properties(out / "serving.properties")["option.trust_remote_code"] == "true"


def test_source_config_never_overwrites_produced_config(tmp_path: Path, source_model: Path) -> None:
    produced = tmp_path / "produced"
    produced.mkdir()
    (produced / "config.json").write_text(json.dumps({"architecture": "LlamaForCausalLM", "produced": True}))
    (produced / "generation_config.json").write_text(json.dumps({"produced": True}))
    os.link(source_model / "model.safetensors", produced / "model.safetensors")
    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=produced, source_dir=source_model,
                  output_dir=tmp_path / "artifact", record=make_record())
    assert json.loads((out / "config.json").read_text())["produced"] is True
    assert json.loads((out / "generation_config.json").read_text()) == {"produced": True}
    assert (out / "tokenizer.json").read_bytes() == (source_model / "tokenizer.json").read_bytes()
    # And carrying again into a finished dir changes nothing that is already there.
    assert carry_source_files(source_model, out, trust_remote_code=True) == ["configuration_tiny.py", "modeling_tiny.py"]
    assert json.loads((out / "config.json").read_text())["produced"] is True


def test_link_or_copy_refuses_to_overwrite_and_follows_symlinks(tmp_path: Path) -> None:
    real = tmp_path / "blob"
    real.write_bytes(b"weights")
    link = tmp_path / "snapshot-file"
    link.symlink_to(real)
    dst = tmp_path / "artifact" / "model.safetensors"
    assert link_or_copy(link, dst) in ("copy", "reflink")  # a small file is never shared
    assert not dst.is_symlink() and dst.read_bytes() == b"weights" and dst.stat().st_ino != real.stat().st_ino
    with pytest.raises(FileExistsError):
        link_or_copy(real, dst)


def test_produced_dir_without_safetensors_is_refused(tmp_path: Path) -> None:
    produced = tmp_path / "bin-only"
    produced.mkdir()
    (produced / "config.json").write_text("{}")
    (produced / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(StepError, match=r"no safetensors weights .*pytorch_model.bin"):
        package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=produced, source_dir=produced,
                output_dir=tmp_path / "out", record=make_record())
    assert not (tmp_path / "out").exists()


def test_invalid_plan_is_refused(tmp_path: Path, source_model: Path) -> None:
    from lmi_build.core.errors import InvalidPlan

    with pytest.raises(InvalidPlan):
        package(make_plan("hf", valid=False), target=HF, layout=HF_LAYOUT, produced=source_model, source_dir=source_model,
                output_dir=tmp_path / "out", record=make_record())


def test_install_directory(tmp_path: Path) -> None:
    from lmi_build.artifact.packager import install_directory

    first = tmp_path / "first"
    first.mkdir()
    (first / "a.txt").write_text("1")
    out = install_directory(first, tmp_path / "out")
    second = tmp_path / "second"
    second.mkdir()
    (second / "b.txt").write_text("2")
    with pytest.raises(LmiBuildError, match="not empty"):
        install_directory(second, out)
    assert (out / "a.txt").is_file() and second.is_dir()
    install_directory(second, out, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
