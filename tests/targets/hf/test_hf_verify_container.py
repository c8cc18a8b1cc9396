"""Issue 22 finding 10: ``verify --for-container`` checks hf artifacts too. A Hugging Face checkpoint is
valid for an hf (vLLM / LMI-Dist) profile only in a format that profile's engine loads
(lmi_build/targets/hf/data/serving_formats.toml, every fact cited there), and never for a TensorRT-LLM
or Neuron profile, whose containers serve engines or NEFFs built for them. Artifacts are packaged
by the real packager; verify runs as the command line runs it (``serving_target`` from the registry)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lmi_build.artifact.verify import serving_target, verify_local
from lmi_build.model.spec import PreQuantization
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild
from tests.cli_process import run_lmi_build
from tests.fixtures_artifact import HF, HF_LAYOUT, make_plan, produced_as

VLLM_0_11 = "lmi-0.35.0-vllm-0.11.1"
VLLM_0_17 = "lmi-0.36.0-vllm-0.17.0"
LMI_DIST = "lmi-0.29.0-lmi-dist-11.0.0"
AUTOAWQ = PreQuantization(method="awq", bits=4, group_size=128, zero_point=True, version="gemm")
Packager = Callable[..., Path]


@pytest.fixture
def hf_artifact_of(make_artifact: Callable[..., Path], source_model: Path) -> Packager:
    """``hf_artifact_of(export_format, quantization)`` -> an hf artifact directory with that plan."""
    made = iter(range(1000))

    def make(export_format: str = "hf", quantization: QuantizationPlan | None = None) -> Path:
        quantization = quantization or QuantizationPlan()
        plan = make_plan("hf", build=HfBuild(tp=1, dtype="float16", export_format=export_format),  # type: ignore[arg-type]
                         quantization=quantization)
        # The checkpoint's own files say its format (verify reads them, not the manifest's record).
        method = quantization.pre_quantized.method if quantization.pre_quantized else \
            {"modelopt_hf": "modelopt", "compressed_tensors": "compressed-tensors"}.get(export_format, export_format)
        produced = produced_as(source_model, source_model.parent / f"produced-{next(made)}",
                               quant_method=None if method == "hf" else method,
                               modelopt_algo=quantization.quant_algo if export_format == "modelopt_hf" else None)
        return make_artifact(plan, HF, HF_LAYOUT, produced, produced)

    return make


def _errors(artifact: Path, container: str) -> list[str]:
    report = verify_local(artifact, TARGETS, serving=serving_target(TARGETS, container=container))
    return [f"{e.code}: {e.message}" for e in report.errors]


# vLLM v0.11.1 modelopt.py:85 QUANT_ALGOS = ["FP8", "NVFP4"]: its ModelOpt loader refuses W4A16_AWQ.
def test_modelopt_awq_refused_by_vllm_0_11(hf_artifact_of: Packager) -> None:
    awq = hf_artifact_of("modelopt_hf", QuantizationPlan(method="awq", quant_algo="W4A16_AWQ", group_size=128))
    errors = _errors(awq, VLLM_0_11)
    assert len(errors) == 1 and errors[0].startswith("hf_format: "), errors
    assert "W4A16_AWQ" in errors[0] and "FP8, NVFP4" in errors[0] and "\n" not in errors[0]


@pytest.mark.parametrize("container", [VLLM_0_11, VLLM_0_17])
def test_modelopt_fp8_loads_on_vllm_profiles(container: str, hf_artifact_of: Packager) -> None:
    fp8 = hf_artifact_of("modelopt_hf", QuantizationPlan(method="fp8", quant_algo="FP8"))
    assert _errors(fp8, container) == []


def test_modelopt_fp8_refused_where_vllm_has_no_modelopt_loader(hf_artifact_of: Packager) -> None:
    fp8 = hf_artifact_of("modelopt_hf", QuantizationPlan(method="fp8", quant_algo="FP8"))
    errors = _errors(fp8, LMI_DIST)
    assert len(errors) == 1 and "no ModelOpt loader" in errors[0], errors


@pytest.mark.parametrize("container", [VLLM_0_11, VLLM_0_17, LMI_DIST])
def test_autoawq_and_plain_load_on_every_hf_profile(container: str, hf_artifact_of: Packager) -> None:
    assert _errors(hf_artifact_of("awq", QuantizationPlan(method="awq", quant_algo="W4A16_AWQ")), container) == []
    assert _errors(hf_artifact_of("hf", QuantizationPlan(pre_quantized=AUTOAWQ)), container) == []
    assert _errors(hf_artifact_of(), container) == []


def test_compressed_tensors_only_where_loaded(hf_artifact_of: Packager) -> None:
    ct = hf_artifact_of("compressed_tensors", QuantizationPlan(method="fp8", quant_algo="FP8"))
    assert _errors(ct, LMI_DIST) == []
    assert any("loads no compressed_tensors checkpoint" in e for e in _errors(ct, VLLM_0_11))


@pytest.mark.parametrize(("container", "kind"), [("lmi-0.30.0-trtllm-0.12.0", "TensorRT-LLM"),
                                                 ("lmi-0.33.0-trtllm-0.21.0", "TensorRT-LLM"),
                                                 ("lmi-0.30.0-neuronx-sdk2.20.1", "Neuron")])
def test_hf_artifact_refused_for_engine_profiles(container: str, kind: str, hf_artifact_of: Packager) -> None:
    for artifact in (hf_artifact_of(), hf_artifact_of("hf", QuantizationPlan(pre_quantized=AUTOAWQ))):
        errors = _errors(artifact, container)
        assert len(errors) == 1, errors
        assert errors[0].startswith("container_target: ") and f"is a {kind} profile" in errors[0]
        assert "an hf profile" in errors[0] and VLLM_0_11 in errors[0] and "\n" not in errors[0]


def test_verify_command_refuses_modelopt_awq_for_vllm_0_11(hf_artifact_of: Packager) -> None:
    awq = hf_artifact_of("modelopt_hf", QuantizationPlan(method="awq", quant_algo="W4A16_AWQ", group_size=128))
    result = run_lmi_build("verify", str(awq), "--for-container", VLLM_0_11, "--json")
    assert result.returncode != 0
    report = json.loads(result.stdout)
    assert report["valid"] is False and [e["code"] for e in report["errors"]] == ["hf_format"]


# ---- issue 30 item 8: the plan names where the checkpoint loads, and verify agrees ----

HF_PROFILES = (LMI_DIST, VLLM_0_11, VLLM_0_17)
FAST_CALIB = ("-o", "calib_size=6", "-o", "calib_max_seq_len=64")  # as the other CPU quantize tests


def _stated(plan_stdout: str) -> dict[str, str]:
    return next(w for w in json.loads(plan_stdout)["warnings"] if w["code"] == "hf_loaded_by")


@pytest.mark.slow  # real ModelOpt AWQ calibration of demo:tiny-llama on the CPU
def test_hf_awq_without_a_profile_loads_where_the_plan_said(tmp_path: Path) -> None:
    """`hf --quantize awq` (no --profile) wrote ModelOpt's W4A16_AWQ, refused by verify --for-container
    for every profile. Now the plan names the profiles that will load the checkpoint, before the
    build, and verify --for-container accepts the built artifact for each of them."""

    args = ("--model", "demo:tiny-llama", "--quantize", "awq", *FAST_CALIB)
    plan = run_lmi_build("plan", "hf", *args, "--json", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    stated = _stated(plan.stdout)["message"]
    named = [profile for profile in HF_PROFILES if profile in stated]
    assert named == list(HF_PROFILES) and "AutoAWQ (quant_method awq)" in stated, stated
    built = run_lmi_build("hf", *args, "--no-cache", "--output", "out", "--json", cwd=tmp_path, timeout=600)
    assert built.returncode == 0, built.stderr
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "awq"
    for container in named:
        verified = run_lmi_build("verify", "out", "--for-container", container, "--json", cwd=tmp_path)
        assert verified.returncode == 0 and json.loads(verified.stdout)["valid"] is True, (container, verified.stdout)
    engines = run_lmi_build("verify", "out", "--for-container", "lmi-0.33.0-trtllm-0.21.0", "--json", cwd=tmp_path)
    assert engines.returncode != 0  # a TensorRT-LLM profile serves engines; the plan did not name it


def test_hf_profile_that_cannot_load_the_checkpoint_is_refused_at_plan_time(tmp_path: Path) -> None:
    """Refused before any calibration: one line naming the formats that would work; nothing written."""
    result = run_lmi_build("hf", "--model", "demo:tiny-mistral", "--quantize", "awq", "--profile", VLLM_0_11,
                           *FAST_CALIB, "--output", "out", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "[hf_format_awq_fold]" in errors[0] and VLLM_0_11 in errors[0], result.stderr
    assert "--quantize gptq or fp8" in errors[0]
    assert not (tmp_path / "out").exists()
