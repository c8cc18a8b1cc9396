"""verify: tampering, layout completeness, serving-target compatibility, and the CLI contract."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.manifest import HardwareTarget, load_manifest
from lmi_build.artifact.packager import carry_source_files, package
from lmi_build.artifact.verify import (
    ServingTarget,
    check_compatibility,
    normalize_sm,
    serving_target,
    verify_local,
)
from lmi_build.core.errors import OptionError, VerifyError
from lmi_build.core.fs import link_or_copy
from lmi_build.core.types import PlanMessage
from lmi_build.planning.plan import BuildPlan, ToolchainRef
from lmi_build.targets import TARGETS
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import (
    HF,
    HF_LAYOUT,
    TargetWithLayouts,
    make_plan,
    make_record,
    write_source_model,
    write_tokenizer,
)


class RankLayout:
    """A minimal engine-style layout, registered only by this test: config.json with the world
    size plus one rank<i>.engine per rank (stands for the TensorRT-LLM layouts' rank checks)."""

    name = "test-ranks"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        for path in sorted(produced.iterdir()):
            link_or_copy(path, staging / path.name)
        carry_source_files(source_dir, staging, trust_remote_code=False)

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return {"engine": "MPI", "option.rolling_batch": "trtllm"}

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        world = json.loads((artifact_dir / "config.json").read_text())["pretrained_config"]["mapping"]["world_size"]
        found = {p.name for p in artifact_dir.glob("rank*.engine")}
        expected = {f"rank{i}.engine" for i in range(world)}
        problems = [PlanMessage(code="rank_missing", message=f"missing {name} (world size {world})")
                    for name in sorted(expected - found)]
        problems += [PlanMessage(code="rank_extra", message=f"unexpected {name} (world size {world})")
                     for name in sorted(found - expected)]
        return problems


RANKS = RankLayout()
# The trtllm target with the test layout: what verify is handed for these artifacts.
TEST_TARGETS = {**TARGETS, "trtllm": TargetWithLayouts(TARGETS["trtllm"], (RANKS,))}


@pytest.fixture
def engine_artifact(tmp_path: Path, make_artifact: Callable[..., Path]) -> Path:
    produced = tmp_path / "engines"
    produced.mkdir()
    (produced / "config.json").write_text(json.dumps(
        {"version": "0.8.0", "pretrained_config": {"mapping": {"world_size": 2, "tp_size": 2, "pp_size": 1}},
         "build_config": {"max_batch_size": 8}}))
    for rank in range(2):
        (produced / f"rank{rank}.engine").write_bytes(bytes([rank]) * 4096)
    source = tmp_path / "source"
    source.mkdir()
    write_tokenizer(source)
    return make_artifact(make_plan("trtllm"), TEST_TARGETS["trtllm"], RANKS, produced, source,
                         hardware=HardwareTarget(gpu_sm="sm90", gpu_name="NVIDIA H100 80GB HBM3"),
                         toolchain={"tensorrt_llm": "0.8.0"})


def _codes(messages: list[PlanMessage]) -> list[str]:
    return [message.code for message in messages]


def test_missing_file(hf_artifact: Path) -> None:
    (hf_artifact / "tokenizer.json").unlink()
    report = verify_local(hf_artifact, TARGETS)
    assert not report.valid
    assert "missing file tokenizer.json" in report.errors[0].message


def test_edited_byte_same_size(hf_artifact: Path) -> None:
    path = hf_artifact / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.unlink()  # break the hard link: the source model stays intact
    path.write_bytes(bytes(data))
    report = verify_local(hf_artifact, TARGETS)
    assert _codes(report.errors) == ["file_hash"]
    assert report.errors[0].message.startswith("model.safetensors content changed: sha256 ")


def test_truncated_file_is_a_size_error(hf_artifact: Path) -> None:
    path = hf_artifact / "tokenizer_config.json"
    text = path.read_text()
    path.unlink()
    path.write_text(text[:-3])
    report = verify_local(hf_artifact, TARGETS)
    assert report.errors[0].code == "file_size"
    assert f"is {len(text) - 3} bytes, the manifest says {len(text)}" in report.errors[0].message


def test_extra_file_is_a_warning(hf_artifact: Path) -> None:
    (hf_artifact / "notes.txt").write_text("hello")
    report = verify_local(hf_artifact, TARGETS)
    assert report.valid
    assert [w.message for w in report.warnings] == ["unexpected file notes.txt (not in the manifest)"]


def test_missing_and_corrupt_manifest(hf_artifact: Path) -> None:
    manifest = hf_artifact / MANIFEST_NAME
    text = manifest.read_text()
    manifest.write_text(text[: len(text) // 2])
    report = verify_local(hf_artifact, TARGETS)
    assert not report.valid and "is not valid JSON" in report.errors[0].message
    data = json.loads(text)
    del data["files"]
    manifest.write_text(json.dumps(data))
    report = verify_local(hf_artifact, TARGETS)
    assert "does not match the manifest schema v1: files: Field required" in report.errors[0].message
    data = json.loads(text)
    data["schema_version"] = 7
    manifest.write_text(json.dumps(data))
    with pytest.raises(VerifyError, match="schema_version 7, this lmi-build reads up to 1"):
        load_manifest(hf_artifact)
    manifest.unlink()
    report = verify_local(hf_artifact, TARGETS)
    assert report.errors[0].message == f"no {MANIFEST_NAME} in {hf_artifact}"


def test_edited_manifest_file_list_is_detected(hf_artifact: Path) -> None:
    path = hf_artifact / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["files"] = [f for f in data["files"] if f["path"] != "chat_template.jinja"]
    path.write_text(json.dumps(data))
    report = verify_local(hf_artifact, TARGETS)
    assert "manifest_digest" in _codes(report.errors)


def test_hf_layout_checks_index_shards(tmp_path: Path, hf_artifact: Path) -> None:
    source = write_source_model(tmp_path / "sharded", shards=2)
    out = package(make_plan("hf"), target=HF, layout=HF_LAYOUT, produced=source, source_dir=source,
                  output_dir=tmp_path / "sharded-artifact", record=make_record(), copy=True)
    (out / "model-00002-of-00002.safetensors").unlink()
    messages = [e.message for e in verify_local(out, TARGETS).errors]
    assert "missing file model-00002-of-00002.safetensors (" in messages[0]
    assert "shard model-00002-of-00002.safetensors listed in model.safetensors.index.json is missing" in messages


def test_engine_artifact_valid_then_extra_and_missing_rank(engine_artifact: Path) -> None:
    assert verify_local(engine_artifact, TEST_TARGETS).valid
    properties = (engine_artifact / "serving.properties").read_text()
    assert "engine=MPI" in properties and "option.rolling_batch=trtllm" in properties

    shutil.copyfile(engine_artifact / "rank1.engine", engine_artifact / "rank2.engine")
    report = verify_local(engine_artifact, TEST_TARGETS)
    assert [e.message for e in report.errors] == ["unexpected rank2.engine (world size 2)"]
    assert [w.message for w in report.warnings] == ["unexpected file rank2.engine (not in the manifest)"]

    (engine_artifact / "rank2.engine").unlink()
    (engine_artifact / "rank1.engine").unlink()
    report = verify_local(engine_artifact, TEST_TARGETS)
    assert [e.message for e in report.errors] == [
        "missing file rank1.engine (4096 bytes in the manifest)", "missing rank1.engine (world size 2)"]


def test_wrong_sm(engine_artifact: Path) -> None:
    report = verify_local(engine_artifact, TEST_TARGETS, serving=serving_target(TARGETS, gpu="sm80"))
    assert [e.message for e in report.errors] == [
        "engines built for sm90, serving GPU is sm80; TensorRT engines run only on the SM they were built on"]
    assert verify_local(engine_artifact, TEST_TARGETS, serving=serving_target(TARGETS, gpu="h100")).valid


def test_wrong_trtllm_and_tensorrt_version(engine_artifact: Path) -> None:
    target = ServingTarget(container="lmi-0.28.0-trtllm-0.9.0", container_target="trtllm",
                           versions={"tensorrt_llm": "0.9.0", "tensorrt": "9.3.0.post12.dev1", "cuda": "12.4"})
    report = verify_local(engine_artifact, TEST_TARGETS, serving=target)
    assert [e.message for e in report.errors] == [
        "engine built with TensorRT-LLM 0.8.0, container lmi-0.28.0-trtllm-0.9.0 has 0.9.0",
        "engine built with TensorRT 9.2.0.post12.dev5, container lmi-0.28.0-trtllm-0.9.0 has 9.3.0.post12.dev1",
    ]
    same = ServingTarget(container="lmi-0.27.0-trtllm-0.8.0", container_target="trtllm",
                         versions={"tensorrt_llm": "0.8.0", "tensorrt": "9.2.0.post12.dev5"})
    assert verify_local(engine_artifact, TEST_TARGETS, serving=same).valid


def test_devices_and_cross_target(engine_artifact: Path) -> None:
    manifest = load_manifest(engine_artifact)
    errors, warnings = check_compatibility(manifest, TARGETS[manifest.target], ServingTarget(devices=1))
    assert [e.message for e in errors] == ["artifact needs 2 GPUs (tp 2 x pp 1), serving target has 1"]
    errors, warnings = check_compatibility(manifest, TARGETS[manifest.target], ServingTarget(devices=8))
    assert not errors and "6 stay idle" in warnings[0].message
    errors, _ = check_compatibility(manifest, TARGETS[manifest.target], ServingTarget(neuron_platform="inf2"))
    assert errors[0].message == "artifact holds TensorRT-LLM engines, serving target is Neuron inf2"
    errors, _ = check_compatibility(manifest, TARGETS[manifest.target], ServingTarget(container="lmi-neuronx", container_target="neuronx", versions={"neuronx_cc": "2.16"}))
    assert errors[0].code == "container_target"


def test_neuron_compatibility(tmp_path: Path, hf_artifact: Path) -> None:
    manifest = load_manifest(hf_artifact)
    build = NeuronxBuild(tp=2, amp="f16", n_positions=(512,), context_length_estimate=(256,), batch_size=1,
                         compiler_flags="--model-type=transformer --auto-cast=none", platform="inf2")
    plan = make_plan("hf").model_copy(update={"target": "neuronx", "build": build,
                                              "toolchain": ToolchainRef(target="neuronx", versions={"neuronx_cc": "2.16.372.0"})})
    neuron = manifest.model_copy(update={"target": "neuronx", "plan": plan.to_json(),
                                         "hardware": HardwareTarget(neuron_platform="inf2"),
                                         "toolchain": manifest.toolchain.model_copy(update={"expected": {"neuronx_cc": "2.16.372.0"}})})
    errors, _ = check_compatibility(neuron, TARGETS[neuron.target], ServingTarget(neuron_platform="trn1"))
    assert [e.message for e in errors] == ["NEFFs compiled for inf2, serving platform is trn1"]
    errors, _ = check_compatibility(neuron, TARGETS[neuron.target], ServingTarget(container="lmi-0.30.0-neuronx", container_target="neuronx", versions={"neuronx_cc": "2.15.128.0"}))
    assert errors[0].message == "artifact built with neuronx-cc 2.16.372.0, container lmi-0.30.0-neuronx has 2.15.128.0"
    errors, _ = check_compatibility(neuron, TARGETS[neuron.target], ServingTarget(compiler_flags="--logfile /tmp/compile.log --model-type=transformer --auto-cast=none"))
    assert errors[0].code == "compiler_flags" and "'--model-type=transformer --auto-cast=none'" in errors[0].message
    errors, _ = check_compatibility(neuron, TARGETS[neuron.target], ServingTarget(gpu_sm="sm90"))
    assert errors[0].code == "target_gpu"
    assert check_compatibility(neuron, TARGETS[neuron.target], ServingTarget(neuron_platform="inf2", devices=2)) == ([], [])


def test_fp8_needs_sm89(hf_artifact: Path) -> None:
    manifest = load_manifest(hf_artifact)
    plan = dict(manifest.plan, quantization={"method": "fp8", "quant_algo": "FP8"})
    fp8 = manifest.model_copy(update={"plan": plan})
    errors, _ = check_compatibility(fp8, TARGETS[fp8.target], ServingTarget(gpu_sm="sm80"))
    assert errors[0].message.startswith("artifact is quantized FP8, which needs sm89 or newer; serving GPU is sm80")
    assert check_compatibility(fp8, TARGETS[fp8.target], ServingTarget(gpu_sm="sm90")) == ([], [])


@pytest.mark.parametrize(("given", "expected"), [("sm90", "sm90"), ("sm_86", "sm86"), ("80", "sm80"),
                                                 ("8.9", "sm89"), ("A10G", "sm86"), ("compute_90", "sm90")])
def test_normalize_sm(given: str, expected: str) -> None:
    assert normalize_sm(given) == expected


def test_normalize_sm_rejects_garbage() -> None:
    with pytest.raises(OptionError, match="'hopper' is not a GPU SM architecture"):
        normalize_sm("hopper")


def test_cli_verify_exit_codes_and_json(engine_artifact: Path) -> None:
    result = run_lmi_build("verify", str(engine_artifact), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    data = json.loads(result.stdout)
    assert data["valid"] is True and data["artifact"]["target"] == "trtllm" and data["artifact"]["files"] == 7

    result = run_lmi_build("verify", str(engine_artifact), "--gpu", "sm80", "--devices", "1", "--json")
    assert result.returncode == 2
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert {e["code"] for e in data["errors"]} == {"gpu_sm", "devices"}

    result = run_lmi_build("verify", str(engine_artifact), "--gpu", "sm80")
    assert result.returncode == 2
    assert "engines built for sm90, serving GPU is sm80" in result.stderr


def test_cli_verify_other_errors_exit_1(tmp_path: Path, engine_artifact: Path) -> None:
    from lmi_build.cli import main

    def run(*args: str) -> int:
        import sys

        old = sys.argv
        sys.argv = ["lmi-build", *args]
        try:
            main()
        except SystemExit as exit_:
            return int(exit_.code or 0)
        finally:
            sys.argv = old
        return 0

    assert run("verify", str(engine_artifact), "--gpu", "hopper") == 1
    assert run("verify", str(engine_artifact), "--neuron-platform", "inf9") == 1
    assert run("verify", str(tmp_path / "nope")) == 1  # nothing there: a usage error, not an invalid artifact


def test_cli_inspect(engine_artifact: Path) -> None:
    result = run_lmi_build("inspect", str(engine_artifact), "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)
    info = json.loads(result.stdout)
    assert info["what"]["target"] == "trtllm" and info["what"]["tp"] == 2 and info["what"]["max_seq_len"] == 512
    assert info["from"]["id"] == "tiny-org/tiny-llama"
    assert info["for"]["gpu_sm"] == "sm90"
    assert info["for"]["versions"]["tensorrt_llm"] == "0.8.0"
    assert info["size"]["files"] == 7
    assert [s["name"] for s in info["steps"]] == ["convert", "package"]
    assert info["built"]["by"].startswith("lmi-build ")
    human = run_lmi_build("inspect", str(engine_artifact))
    assert human.returncode == 0
    for text in ("tiny-org/tiny-llama", "sm90", "lmi-0.27.0-trtllm-0.8.0", "rank0.engine", "package"):
        assert text in human.stdout


def test_verify_and_inspect_do_not_import_heavy_libraries(engine_artifact: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from lmi_build.cli import main\n"
        f"for args in (['verify', {str(engine_artifact)!r}, '--gpu', 'sm90', '-q'], ['inspect', {str(engine_artifact)!r}, '-q']):\n"
        "    sys.argv = ['lmi-build', *args]\n"
        "    try:\n"
        "        main()\n"
        "    except SystemExit as exit_:\n"
        "        assert not exit_.code, exit_.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'modelopt', 'boto3', 'numpy') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_cli_verify_for_container_profiles(engine_artifact: Path) -> None:
    from lmi_build.targets.trtllm.profiles import get_profile

    newer = get_profile("lmi-0.28.0-trtllm-0.9.0")
    result = run_lmi_build("verify", str(engine_artifact), "--for-container", newer.name, "--json")
    assert result.returncode == 2
    messages = [e["message"] for e in json.loads(result.stdout)["errors"]]
    assert f"engine built with TensorRT-LLM 0.8.0, container {newer.name} has {newer.tensorrt_llm}" in messages
    result = run_lmi_build("verify", str(engine_artifact), "--for-container", "lmi-0.27.0-trtllm-0.8.0",
                                 "--gpu", "sm90", "--devices", "2")
    assert result.returncode == 0, (result.stdout + result.stderr)
    result = run_lmi_build("verify", str(engine_artifact), "--for-container", "lmi-9.9.9")
    assert result.returncode == 1
    assert "unknown container profile 'lmi-9.9.9'" in result.stderr


def test_verify_entries_is_the_one_file_check(tmp_path: Path) -> None:
    """verify, publish and pull share verify_entries: missing, resized, rewritten and linked files."""
    from lmi_build.artifact.files import list_files, verify_entries

    for name in ("a.bin", "b.bin", "c.bin", "d.bin"):
        (tmp_path / name).write_bytes(name.encode() * 100)
    entries = list_files(tmp_path)
    assert verify_entries(tmp_path, entries) == []
    (tmp_path / "a.bin").unlink()
    (tmp_path / "b.bin").write_bytes(b"short")
    (tmp_path / "c.bin").write_bytes(b"x" * 500)  # same size, other content
    (tmp_path / "d.bin").unlink()
    (tmp_path / "d.bin").symlink_to(tmp_path / "c.bin")  # a link is never an artifact file
    kinds = {p.entry.path: p.kind for p in verify_entries(tmp_path, entries)}
    assert kinds == {"a.bin": "missing", "b.bin": "size", "c.bin": "sha256", "d.bin": "missing"}
    assert {p.entry.path for p in verify_entries(tmp_path, entries, rehash=False)} == {"a.bin", "b.bin", "d.bin"}
