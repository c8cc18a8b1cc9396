"""Memory arithmetic on real fixture configs (no planner, no torch)."""

from __future__ import annotations

import pytest

from lmi_build.model.normalize import read_spec_file
from lmi_build.model.spec import ModelSpec, PreQuantization
from lmi_build.planning.findings import Findings
from lmi_build.planning.instances import GIB, get_instance, load_instances
from lmi_build.planning.memory import Workload, check_fit, estimate, kv_bytes_per_token, weight_bytes
from lmi_build.planning.plan import QuantizationPlan
from tests.conftest import FIXTURE_CONFIGS

AWQ = QuantizationPlan(method="awq", quant_algo="W4A16_AWQ", group_size=128)


@pytest.fixture(scope="module")
def llama7b() -> ModelSpec:
    return read_spec_file(FIXTURE_CONFIGS / "meta-llama--Llama-2-7b-hf")


def test_llama2_7b_fp16_weights_are_13_5_gb(llama7b: ModelSpec) -> None:
    assert 6.7e9 < llama7b.num_parameters < 6.8e9
    assert weight_bytes(llama7b, "float16", QuantizationPlan()) == pytest.approx(13.48e9, rel=0.005)
    assert weight_bytes(llama7b, "float32", QuantizationPlan()) == 2 * weight_bytes(llama7b, "float16", QuantizationPlan())


def test_llama2_7b_awq_keeps_embeddings_16_bit(llama7b: ModelSpec) -> None:
    embeddings = 2 * 32000 * 4096  # embed_tokens + lm_head, untied
    body = llama7b.num_parameters - embeddings
    expected = body * (0.5 + 2.5 / 128) + embeddings * 2
    assert weight_bytes(llama7b, "float16", AWQ) == pytest.approx(expected, rel=1e-6)
    assert weight_bytes(llama7b, "float16", AWQ) == pytest.approx(3.89e9, rel=0.01)


def test_eight_bit_methods_and_prequantized(llama7b: ModelSpec) -> None:
    fp16 = weight_bytes(llama7b, "float16", QuantizationPlan())
    for method in ("smoothquant", "fp8", "int8_wo"):
        eight = weight_bytes(llama7b, "float16", QuantizationPlan(method=method))
        assert 0.5 * fp16 < eight < 0.55 * fp16, method
    pre = QuantizationPlan(pre_quantized=PreQuantization(method="gptq", bits=4, group_size=128, zero_point=True))
    assert weight_bytes(llama7b, "float16", pre) == weight_bytes(llama7b, "float16", AWQ)


def test_kv_cache_per_token_mha_and_gqa(llama7b: ModelSpec) -> None:
    assert kv_bytes_per_token(llama7b, "float16", QuantizationPlan()) == 2 * 32 * 32 * 128 * 2
    mistral = read_spec_file(FIXTURE_CONFIGS / "mistralai--Mistral-7B-v0.1")
    assert kv_bytes_per_token(mistral, "float16", QuantizationPlan()) == 2 * 32 * 8 * 128 * 2
    fp8_kv = QuantizationPlan(method="fp8", kv_cache_quant_algo="FP8")
    assert kv_bytes_per_token(mistral, "float16", fp8_kv) == 2 * 32 * 8 * 128


def test_per_device_share_and_replicated_kv_heads(llama7b: ModelSpec) -> None:
    one = estimate(llama7b, "float16", QuantizationPlan(), Workload(8, 2048, tp=1), None)
    four = estimate(llama7b, "float16", QuantizationPlan(), Workload(8, 2048, tp=4), None)
    assert one.kv_cache_bytes == 8 * 2048 * one.kv_bytes_per_token
    assert four.per_device_bytes == pytest.approx(one.per_device_bytes / 4, rel=1e-6)
    # Mistral has 8 KV heads: at tp=16 each device still holds a whole head (replicated).
    mistral = read_spec_file(FIXTURE_CONFIGS / "mistralai--Mistral-7B-v0.1")
    at8 = estimate(mistral, "float16", QuantizationPlan(), Workload(1, 1024, tp=8), None)
    at16 = estimate(mistral, "float16", QuantizationPlan(), Workload(1, 1024, tp=16), None)
    kv8 = at8.per_device_bytes - -(-at8.weight_bytes // 8)
    kv16 = at16.per_device_bytes - -(-at16.weight_bytes // 16)
    assert kv8 == kv16 == 2 * 32 * 1 * 128 * 2 * 1024


def test_host_ram_covers_loaded_and_exported_model(llama7b: ModelSpec) -> None:
    plain = estimate(llama7b, "float16", QuantizationPlan(), Workload(1, 1024, tp=1), None)
    quant = estimate(llama7b, "float16", AWQ, Workload(1, 1024, tp=1), None)
    assert plain.host_ram_bytes is not None and quant.host_ram_bytes is not None
    assert plain.host_ram_bytes > 2 * plain.weight_bytes
    assert plain.weight_bytes + quant.weight_bytes < quant.host_ram_bytes < plain.host_ram_bytes


def test_fit_refused_with_gib_numbers(llama7b: ModelSpec) -> None:
    instance = get_instance("g5.xlarge")
    findings = Findings()
    workload = Workload(1, 32768, tp=1)
    memory = check_fit(estimate(llama7b, "float32", QuantizationPlan(), workload, instance), workload,
                       instance, findings)
    assert memory.fits is False
    [error] = findings.errors
    assert error.code == "memory_fit"
    assert "per GPU" in error.message and "g5.xlarge has 22.0 GiB usable" in error.message


def test_paged_kv_that_does_not_fit_whole_batch_is_a_warning(llama7b: ModelSpec) -> None:
    instance = get_instance("g5.2xlarge")
    findings = Findings()
    workload = Workload(64, 2048, tp=1)
    memory = check_fit(estimate(llama7b, "float16", QuantizationPlan(), workload, instance), workload,
                       instance, findings)
    assert memory.fits is True and not findings.errors
    assert [w.code for w in findings.warnings] == ["kv_cache_partial"]
    neuron = Findings()
    preallocated = Workload(64, 2048, tp=1, preallocated=True)
    check_fit(estimate(llama7b, "float16", QuantizationPlan(), preallocated, instance), preallocated,
              instance, neuron)
    assert [e.code for e in neuron.errors] == ["memory_fit"]


def test_instance_table_is_complete() -> None:
    instances = load_instances()
    for name, devices, sm in (("g5.xlarge", 1, "sm86"), ("g5.48xlarge", 8, "sm86"), ("g6.12xlarge", 4, "sm89"),
                              ("g6e.48xlarge", 8, "sm89"), ("p4d.24xlarge", 8, "sm80"),
                              ("p4de.24xlarge", 8, "sm80"), ("p5.48xlarge", 8, "sm90"),
                              ("p5e.48xlarge", 8, "sm90")):
        assert instances[name].devices == devices and instances[name].accelerator.sm == sm
    assert instances["p4de.24xlarge"].usable_bytes_per_device > 70 * GIB
    for name, cores, platform in (("inf2.xlarge", 2, "inf2"), ("inf2.8xlarge", 2, "inf2"),
                                  ("inf2.24xlarge", 12, "inf2"), ("inf2.48xlarge", 24, "inf2"),
                                  ("trn1.2xlarge", 2, "trn1"), ("trn1.32xlarge", 32, "trn1")):
        assert instances[name].devices == cores and instances[name].accelerator.platform == platform
        assert instances[name].accelerator.memory_gib == 16.0


def test_unknown_instance_lists_its_family() -> None:
    from lmi_build.core.errors import OptionError

    with pytest.raises(OptionError) as raised:
        get_instance("g5.3xlarge")
    assert raised.value.hint is not None and "g5.12xlarge" in raised.value.hint
