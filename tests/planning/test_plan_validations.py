"""One negative test per validation rule (checked by its stable code), plus the positive twin."""

from __future__ import annotations

import pytest

from lmi_build.core.types import PlanMessage
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.hf.knobs import HfBuild
from lmi_build.targets.hf.profiles import load_profiles as load_hf_profiles
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.trtllm.knobs import TrtllmBuild
from tests.fixtures_planning import ModelDirFactory, Planner, codes, warning_codes

LLAMA = "meta-llama--Llama-2-7b-hf"
MISTRAL = "mistralai--Mistral-7B-v0.1"
AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def test_llama_trtllm_defaults(plan_model: Planner) -> None:
    # The LMI defaults as the toolkit-era containers build them (0.30); the default profile (0.21, LLM
    # API) takes max_seq_len from the model and serves with engine=Python (issue 10), checked below.
    plan = plan_model("trtllm", LLAMA, profile="lmi-0.30.0-trtllm-0.12.0")
    assert plan.valid, plan.errors
    assert isinstance(plan.build, TrtllmBuild)
    assert (plan.build.tp, plan.build.max_input_len, plan.build.max_output_len) == (1, 1024, 512)
    assert plan.build.max_seq_len == 1536
    assert plan.options["engine"] == "MPI"
    assert plan.options["option.tensor_parallel_degree"] == "1"
    assert plan.options["option.max_input_len"] == "1024"
    assert plan.option_sources["option.tensor_parallel_degree"] == "derived"  # container default: max
    assert "tp_default" in warning_codes(plan)
    assert plan.toolchain.profile and plan.toolchain.versions["tensorrt_llm"]
    assert plan.cache_key.startswith("sha256:") and len(plan.cache_key) == 71
    default = plan_model("trtllm", LLAMA)
    assert isinstance(default.build, TrtllmBuild) and default.valid, default.errors
    assert (default.build.max_input_len, default.build.max_seq_len) == (1024, 4096)  # Llama-2's 4096 positions
    assert default.options["engine"] == "Python"


def test_tp_must_divide_heads(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA, tp="3")
    assert "tp_heads" in codes(plan)
    message = next(m for m in plan.errors if m.code == "tp_heads")
    assert "32 attention heads" in message.message and message.hint and "8" in message.hint


def test_kv_heads_and_tp_must_divide_each_other(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    odd = model_dir(LLAMA, hidden_size=6144, num_attention_heads=48, num_key_value_heads=12)
    assert "tp_kv_heads" in codes(plan_model("trtllm", odd, tp="8"))
    assert plan_model("trtllm", odd, tp="4").valid
    # Mistral: 8 KV heads divide tp=16 (KV heads replicated), and tp=16 divides the 32 heads.
    assert plan_model("trtllm", MISTRAL, tp="16").valid


def test_max_lengths_within_positions(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    plan = plan_model("trtllm", LLAMA, max_input_len=4000, max_output_len=1000)
    assert codes(plan) == {"max_len_positions"}
    assert "5000" in plan.errors[0].message and "4096" in plan.errors[0].message
    scaled = model_dir(LLAMA, rope_scaling={"type": "linear", "factor": 2.0})
    assert plan_model("trtllm", scaled, max_input_len=4000, max_output_len=1000).valid
    # ALiBi (BLOOM) has no position limit.
    assert "max_len_positions" not in codes(plan_model("hf", "bigscience--bloom-560m", max_input_len=100000,
                                                       max_output_len=1000))


def test_neuronx_buckets_and_context_estimates(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA)
    assert plan.valid, plan.errors
    assert isinstance(plan.build, NeuronxBuild)
    assert plan.build.n_positions == (128, 256, 512, 1024, 2048, 4096)  # min(4096, 4096)
    assert plan.build.context_length_estimate == (64, 128, 256, 512, 1024, 2048)
    assert plan.build.amp == "f16" and plan.options["engine"] == "Python"
    assert plan.build.compiler_flags == ("--logfile /tmp/compile.log --temp-dir=/tmp "
                                         "--model-type=transformer --auto-cast=none")
    above = plan_model("neuronx", LLAMA, n_positions="1024", context_length_estimate="512,2048")
    assert above.valid and "context_bucket_unused" in warning_codes(above)  # TNX compiles it as given
    ok = plan_model("neuronx", LLAMA, n_positions="1024", context_length_estimate="256,512")
    assert ok.valid and isinstance(ok.build, NeuronxBuild) and ok.build.context_length_estimate == (256, 512)


def test_neuronx_continuous_batching_and_default_positions(plan_model: Planner) -> None:
    plan = plan_model("neuronx", MISTRAL, tp="2", max_batch_size=4)
    assert isinstance(plan.build, NeuronxBuild)
    assert plan.build.continuous_batching and plan.build.batch_size == 4
    assert plan.build.n_positions == (4096,)  # min(32768, 4096)
    assert plan.build.context_length_estimate == (128, 1024, 2048, 4096)
    opt = plan_model("neuronx", "facebook--opt-125m", max_batch_size=4)  # OPT: no continuous batching
    assert isinstance(opt.build, NeuronxBuild) and not opt.build.continuous_batching
    assert opt.build.n_positions == (128, 256, 512, 1024, 2048)  # max_position_embeddings 2048


def test_neuronx_tp_degrees(plan_model: Planner) -> None:
    assert "tp_neuron_degree" in codes(plan_model("neuronx", LLAMA, tp="16"))
    on_trn1 = plan_model("neuronx", LLAMA, tp="4", instance_type="trn1.32xlarge")
    assert "tp_neuron_degree" in codes(on_trn1)
    assert "trn1" in next(m for m in on_trn1.errors if m.code == "tp_neuron_degree").message
    assert plan_model("neuronx", LLAMA, tp="4", instance_type="inf2.24xlarge").valid


def test_neuronx_gqa_effective_strategy(plan_model: Planner) -> None:
    plan = plan_model("neuronx", MISTRAL, tp="2", option=("option.group_query_attention=shard-over-batch",))
    assert isinstance(plan.build, NeuronxBuild)
    assert (plan.build.gqa_requested, plan.build.gqa_effective) == ("shard-over-batch", "shard-over-heads")
    assert "gqa_fallback" in warning_codes(plan)
    bogus = plan_model("neuronx", LLAMA, tp="8", option=("option.group_query_attention=bogus",))
    # Not one of the table's strategies: resolution's error, reported once, naming the key.
    (error,) = bogus.errors
    assert error.code == "invalid_value" and error.message.startswith("option.group_query_attention=bogus")
    assert error.hint is not None and "shard-over-heads" in error.hint


def test_neuronx_compiler_flags_follow_options(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, option=("option.neuron_optimize_level=3",
                                                "option.enable_mixed_precision_accumulation=false"))
    assert isinstance(plan.build, NeuronxBuild)
    assert plan.build.compiler_flags == ("--logfile /tmp/compile.log --temp-dir=/tmp -O3 "
                                         "--enable-mixed-precision-accumulation "
                                         "--model-type=transformer --auto-cast=none")
    env = plan_model("neuronx", LLAMA, env={"NEURON_CC_FLAGS": "--retry_failed_compilation"})
    assert isinstance(env.build, NeuronxBuild)
    assert env.build.compiler_flags == "--retry_failed_compilation --model-type=transformer --auto-cast=none"


def test_quantize_supported_for_architecture_and_target(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA, quantize="awq")
    assert plan.valid, plan.errors
    assert plan.quantization.method == "awq" and plan.quantization.calibration is not None
    refused = plan_model("trtllm", "baichuan-inc--Baichuan2-13B-Chat", quantize="awq", trust_remote_code=True)
    assert "quantize_unsupported" in codes(refused)
    assert "smoothquant" in next(m for m in refused.errors if m.code == "quantize_unsupported").message


def test_prequantized_models_are_not_requantized(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    awq = model_dir(LLAMA, quantization_config=AWQ_CONFIG)
    plan = plan_model("trtllm", awq)
    assert plan.valid, plan.errors
    assert plan.quantization.pre_quantized is not None and plan.quantization.method is None
    assert isinstance(plan.build, TrtllmBuild) and plan.build.checkpoint_route == "vendor"
    assert "already_quantized" in codes(plan_model("trtllm", awq, quantize="awq"))
    assert "prequantized_unsupported" in codes(plan_model("neuronx", awq))
    gptq = model_dir(LLAMA, dirname="gptq", quantization_config={"quant_method": "gptq", "bits": 4,
                                                                  "group_size": 128, "desc_act": True})
    assert "gptq_desc_act" in codes(plan_model("trtllm", gptq))
    assert plan_model("hf", gptq).valid


def test_neuronx_refuses_gpu_quantization(plan_model: Planner) -> None:
    assert "quantize_target" in codes(plan_model("neuronx", LLAMA, quantize="awq"))


def test_neuronx_int8(plan_model: Planner) -> None:
    plan = plan_model("neuronx", LLAMA, quantize="int8")
    assert plan.valid, plan.errors
    assert plan.quantization.method == "int8" and plan.options["option.quantize"] == "static_int8"
    assert plan.memory is not None and plan.memory.weight_bytes < 0.6 * plan.spec.num_parameters * 2


def test_restricted_and_refused_options(plan_model: Planner) -> None:
    assert plan_model("trtllm", LLAMA, option=("option.use_fused_mlp=true",)).valid
    assert "option_not_allowed" in codes(plan_model("trtllm", MISTRAL, option=("option.use_fused_mlp=true",)))
    qwen = plan_model("trtllm", "Qwen--Qwen-7B", trust_remote_code=True, option=("option.multi_block_mode=true",))
    assert "option_refused" in codes(qwen)


def test_remote_code_needs_trust(plan_model: Planner) -> None:
    assert "remote_code" in codes(plan_model("hf", "tiiuae--falcon-7b"))
    assert "remote_code" not in codes(plan_model("hf", "tiiuae--falcon-7b", trust_remote_code=True))


def test_rotary_scaling_options_go_together(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA, option=("option.rotary_scaling_type=linear",))
    assert "rotary_scaling_pair" in codes(plan)
    both = plan_model("trtllm", LLAMA, option=("option.rotary_scaling_type=linear",
                                               "option.rotary_scaling_factor=2.0"))
    assert both.valid, both.errors
    assert isinstance(both.build, TrtllmBuild) and both.build.rotary_scaling_factor == 2.0


def test_architecture_unsupported_lists_other_targets(plan_model: Planner) -> None:
    plan = plan_model("trtllm", "facebook--opt-125m")
    assert codes(plan) == {"architecture_unsupported"}
    assert plan.build is None and not plan.valid
    assert plan.errors[0].hint and "neuronx" in plan.errors[0].hint and "hf" in plan.errors[0].hint


def test_version_options_inferred_or_required(plan_model: Planner, model_dir: ModelDirFactory) -> None:
    plan = plan_model("trtllm", "baichuan-inc--Baichuan2-13B-Chat", trust_remote_code=True)
    assert plan.valid, plan.errors
    assert isinstance(plan.build, TrtllmBuild)
    assert plan.build.model_version == {"baichuan_model_version": "v2_13b"}
    assert plan.options["option.baichuan_model_version"] == "v2_13b"
    odd = model_dir("baichuan-inc--Baichuan2-13B-Chat", vocab_size=50000)
    assert "model_version_required" in codes(plan_model("trtllm", odd, trust_remote_code=True))
    given = plan_model("trtllm", odd, trust_remote_code=True, option=("option.baichuan_model_version=v2_13b",))
    assert given.valid, given.errors


def test_tp_max_resolution(plan_model: Planner) -> None:
    assert "tp_max_needs_instance" in codes(plan_model("trtllm", LLAMA, tp="max"))
    plan = plan_model("trtllm", LLAMA, tp="max", instance_type="g5.12xlarge")
    assert isinstance(plan.build, TrtllmBuild) and plan.build.tp == 4
    assert plan.options["option.tensor_parallel_degree"] == "4"
    assert plan.option_sources["option.tensor_parallel_degree"] == "derived"
    neuron = plan_model("neuronx", LLAMA, tp="max", instance_type="inf2.48xlarge")
    assert isinstance(neuron.build, NeuronxBuild) and neuron.build.tp == 24
    # 32 heads do not divide over 24 cores: transformers-neuronx pads them to 48 (tests/targets/neuronx/test_neuronx_tp_heads.py).
    assert "tp_heads" not in codes(neuron) and "tp_heads_padded" in {w.code for w in neuron.warnings}


def test_instance_fit_and_refusal(plan_model: Planner) -> None:
    fits = plan_model("trtllm", LLAMA, instance_type="g5.2xlarge", max_batch_size=4)
    assert fits.valid and fits.memory is not None and fits.memory.fits is True
    big = plan_model("trtllm", "microsoft--Orca-2-13b", instance_type="g5.2xlarge")
    assert codes(big) == {"memory_fit"}
    message = big.errors[0].message
    assert "per GPU" in message and "g5.2xlarge has 22.0 GiB usable" in message
    assert plan_model("trtllm", "microsoft--Orca-2-13b", tp="4", instance_type="g5.12xlarge").valid
    assert "instance_devices" in codes(plan_model("trtllm", LLAMA, tp="8", instance_type="g5.12xlarge"))
    assert "instance_target" in codes(plan_model("trtllm", LLAMA, instance_type="inf2.xlarge"))
    assert "instance_target" in codes(plan_model("neuronx", LLAMA, instance_type="g5.xlarge"))
    neuron = plan_model("neuronx", LLAMA, tp="2", instance_type="inf2.xlarge")
    assert neuron.memory is not None and neuron.memory.fits is True, neuron.errors


def test_hf_target_quantized_export(plan_model: Planner) -> None:
    plan = plan_model("hf", MISTRAL, quantize="fp8", dtype="bf16")
    assert plan.valid, plan.errors
    assert isinstance(plan.build, HfBuild)
    assert plan.build.export_format == "modelopt_hf" and plan.build.dtype == "bfloat16"
    assert plan.options["option.dtype"] == "bf16"


@pytest.mark.parametrize("dtype", ["fp8x", "int3"])
def test_bad_dtype(plan_model: Planner, dtype: str) -> None:
    # Not one of the table's choices: resolution's error, reported once (never again as "dtype").
    plan = plan_model("hf", LLAMA, dtype=dtype)
    assert [(m.code, m.message.split(":")[0]) for m in plan.errors] == [("invalid_value", f"option.dtype={dtype}")]
    # A choice of the table (LMI-Dist's int8) that lmi-build cannot build: the planner's "dtype".
    assert "dtype" in codes(plan_model("hf", LLAMA, dtype="int8"))


def test_every_problem_is_collected(plan_model: Planner) -> None:
    plan = plan_model("trtllm", MISTRAL, tp="3", max_input_len=40000, option=("option.use_fused_mlp=true",))
    assert {"tp_heads", "max_len_positions", "option_not_allowed"} <= codes(plan)


@pytest.mark.parametrize("profile", [None, "lmi-0.27.0-trtllm-0.8.0", "djl-nightly-trtllm-1.0.0"])
def test_trtllm_gptq_is_refused_with_what_to_do(plan_model: Planner, profile: str | None) -> None:
    """No TensorRT-LLM release quantizes to GPTQ (its W4A16_GPTQ comes from converting a GPTQ
    checkpoint): trtllm --quantize gptq is one error that names awq and the GPTQ-checkpoint route,
    not a W4A16_AWQ engine that contradicts its own option.quantize=gptq."""
    plan = plan_model("trtllm", LLAMA, quantize="gptq", profile=profile)
    errors = [e for e in plan.errors if e.code != "tp_default"]
    assert [e.code for e in errors] == ["quantize_target"], errors
    assert "\n" not in errors[0].message and errors[0].hint and "--quantize awq" in errors[0].hint
    assert plan.quantization.quant_algo is None and "W4A16_AWQ" not in plan.model_dump_json(exclude={"errors"})


# every hf profile, oldest first (lmi-0.29.0-lmi-dist-11.0.0 first: the one LMI-Dist profile)
HF_PROFILES = tuple(p.name for p in load_hf_profiles())
VLLM_PROFILES = tuple(p.name for p in load_hf_profiles() if p.engine == "vllm")
# --quantize fp8: the profiles that load some FP8 format lmi-build writes, and those loading ModelOpt's
# (vLLM 0.6.2+: LMI-Dist 0.30-0.32 and every vLLM profile; 0.29 loads compressed-tensors; 0.27-0.28 neither)
FP8_PROFILES = tuple(p.name for p in load_hf_profiles() if p.formats.get("fp8"))
MODELOPT_FP8_PROFILES = tuple(p.name for p in load_hf_profiles() if p.formats.get("fp8") == "modelopt_hf")
# --quantize awq / gptq: every profile but LMI 0.26's LMI-Dist 8, which is told the method only by option.quantize
# (which lmi-build withholds for a quantized checkpoint: its profile's formats cite it)
AWQ_PROFILES = tuple(p.name for p in load_hf_profiles() if p.formats.get("awq") == "awq")
GPTQ_PROFILES = tuple(p.name for p in load_hf_profiles() if p.formats.get("gptq") == "gptq")
LMI_DIST_8 = "lmi-0.26.0-lmi-dist-8.0.0"


@pytest.mark.parametrize("profile", [None, *GPTQ_PROFILES])
def test_hf_gptq_is_never_labelled_awq(plan_model: Planner, profile: str | None) -> None:
    """hf --quantize gptq writes quant_method gptq for every container (ModelOpt's own export
    would label the checkpoint W4A16_AWQ), and serving.properties names no quantization the
    checkpoint's config.json does not (option.quantize is left to config.json)."""
    plan = plan_model("hf", LLAMA, quantize="gptq", profile=profile)
    assert plan.valid, plan.errors
    assert isinstance(plan.build, HfBuild) and plan.build.export_format == "gptq"
    assert plan.quantization.quant_algo == "W4A16_GPTQ"
    assert "option.quantize" not in plan.options
    assert "W4A16_AWQ" not in plan.model_dump_json()


@pytest.mark.parametrize(("profile", "method", "expected"), [
    (None, "awq", "awq"), (None, "fp8", "modelopt_hf"), (None, "gptq", "gptq"),
    ("lmi-0.29.0-lmi-dist-11.0.0", "awq", "awq"), ("lmi-0.35.0-vllm-0.11.1", "awq", "awq"),
    ("lmi-0.36.0-vllm-0.17.0", "awq", "awq"), ("lmi-0.35.0-vllm-0.11.1", "fp8", "modelopt_hf"),
    ("lmi-0.36.0-vllm-0.17.0", "fp8", "modelopt_hf"), ("lmi-0.29.0-lmi-dist-11.0.0", "fp8", "compressed_tensors"),
])
def test_hf_format_follows_the_container_profile(plan_model: Planner, profile: str | None, method: str,
                                                 expected: str) -> None:
    plan = plan_model("hf", LLAMA, quantize=method, profile=profile)
    assert plan.valid, plan.errors
    assert isinstance(plan.build, HfBuild) and plan.build.export_format == expected
    assert plan.toolchain.profile == profile
    assert "option.quantize" not in plan.options  # config.json / hf_quant_config.json declare it


def test_hf_fp8_for_lmi_029_is_compressed_tensors_with_a_gpu_warning(plan_model: Planner) -> None:
    # vLLM 0.5.3.post1 (LMI 0.29) has no ModelOpt loader; it loads FP8 from compressed-tensors.
    profile = "lmi-0.29.0-lmi-dist-11.0.0"
    plan = plan_model("hf", LLAMA, quantize="fp8", profile=profile)
    assert plan.valid, plan.errors
    assert "hf_format_fp8_gpu" in warning_codes(plan)
    kv = plan_model("hf", LLAMA, quantize="fp8", profile=profile, option=("option.kv_cache_dtype=fp8",))
    assert "hf_format_kv_cache" in codes(kv)
    assert "hf_format_fp8_gpu" not in warning_codes(plan_model("hf", LLAMA, quantize="fp8",
                                                               profile="lmi-0.35.0-vllm-0.11.1"))


def test_hf_refuses_a_format_the_container_cannot_load(plan_model: Planner,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Every method a recipe offers for hf has a format in every shipped profile today; a profile
    # whose entry is "" (loads none lmi-build writes) is refused, naming what it does load.
    import lmi_build.targets.hf.plan as hf_plan

    profile = "lmi-0.29.0-lmi-dist-11.0.0"
    real = hf_plan.get_profile(profile)
    without_fp8 = real.model_copy(update={"formats": {**real.formats, "fp8": ""}})
    monkeypatch.setattr(hf_plan, "get_profile", lambda name: without_fp8)
    plan = plan_model("hf", LLAMA, quantize="fp8", profile=profile)
    assert "hf_format" in codes(plan)
    error = next(m for m in plan.errors if m.code == "hf_format")
    assert profile in error.message and error.hint and "awq" in error.hint
    assert f"or --profile {' or '.join(n for n in FP8_PROFILES if n != profile)}" in error.hint  # those that load it


def test_hf_packed_formats_note_bf16_and_refuse_kv_cache_scales(plan_model: Planner) -> None:
    profile = "lmi-0.35.0-vllm-0.11.1"
    assert "hf_format_dtype" in warning_codes(plan_model("hf", LLAMA, quantize="awq", profile=profile, dtype="bf16"))
    assert "hf_format_dtype" not in warning_codes(plan_model("hf", LLAMA, quantize="awq", profile=profile,
                                                             dtype="fp16"))
    kv = plan_model("hf", LLAMA, quantize="awq", profile=profile, option=("option.kv_cache_dtype=fp8",))
    assert "hf_format_kv_cache" in codes(kv)
    # Unquantized and pre-quantized builds keep the user's option.quantize story unchanged.
    assert plan_model("hf", LLAMA, profile=profile).build.export_format == "hf"  # type: ignore[union-attr]


def test_hf_profile_names_are_checked(plan_model: Planner) -> None:
    from lmi_build.core.errors import UnknownName

    with pytest.raises(UnknownName, match="unknown hf container profile") as raised:
        plan_model("hf", LLAMA, quantize="awq", profile="lmi-0.33.0-trtllm-0.21.0")
    assert raised.value.hint and all(name in raised.value.hint for name in HF_PROFILES)


def test_hf_awq_format_needs_a_model_modelopt_can_fold(plan_model: Planner) -> None:
    profile = "lmi-0.35.0-vllm-0.11.1"
    plan = plan_model("hf", MISTRAL, quantize="awq", profile=profile)
    assert "hf_format_awq_fold" in codes(plan)
    assert "hf_format_awq_fold" not in codes(plan_model("hf", MISTRAL, quantize="gptq", profile=profile))
    assert "hf_format_awq_fold" not in codes(plan_model("hf", MISTRAL, quantize="awq"))  # ModelOpt's format
    error = next(m for m in plan.errors if m.code == "hf_format_awq_fold")
    assert "\n" not in error.message and error.hint and "--quantize gptq or fp8" in error.hint


def _loaded_by(plan: BuildPlan) -> PlanMessage:
    assert plan.valid, plan.errors
    return next(m for m in plan.warnings if m.code == "hf_loaded_by")


# Issue 30 item 8: `hf --quantize awq` without --profile wrote ModelOpt's W4A16_AWQ, which no LMI
# container loads (verify --for-container refused it for every profile). Without --profile the
# format is the one the newest hf profile loads, and the plan names, before the build, every
# profile that loads it: the rule verify --for-container applies to the built artifact.
@pytest.mark.parametrize("profile", [None, *AWQ_PROFILES])
def test_hf_awq_plan_names_every_profile_that_loads_it(plan_model: Planner, profile: str | None) -> None:
    plan = plan_model("hf", LLAMA, quantize="awq", profile=profile)
    assert isinstance(plan.build, HfBuild) and plan.build.export_format == "awq"
    stated = _loaded_by(plan)
    assert stated.message == ("--quantize awq writes an AutoAWQ (quant_method awq) checkpoint, loaded by "
                              + ", ".join(AWQ_PROFILES) + f"; not by {LMI_DIST_8}")
    assert stated.hint == "verify --for-container PROFILE checks the built artifact"


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_hf_packed_formats_are_refused_on_lmi_dist_8(plan_model: Planner, method: str) -> None:
    assert set(HF_PROFILES) - set(AWQ_PROFILES) == set(HF_PROFILES) - set(GPTQ_PROFILES) == {LMI_DIST_8}
    plan = plan_model("hf", LLAMA, quantize=method, profile=LMI_DIST_8)
    error = next(m for m in plan.errors if m.code == "hf_format")
    assert not plan.valid and f"loads no --quantize {method} checkpoint" in error.message and "\n" not in error.message
    assert error.hint and error.hint.startswith("leave --quantize out for this profile")


def test_hf_fp8_plan_names_the_profiles_that_load_it_and_how_to_build_for_the_others(plan_model: Planner) -> None:
    stated = _loaded_by(plan_model("hf", LLAMA, quantize="fp8"))
    lmi_dist = "lmi-0.29.0-lmi-dist-11.0.0"  # compressed-tensors FP8 (no ModelOpt loader in vLLM 0.5.3)
    others = [name for name in HF_PROFILES if name not in MODELOPT_FP8_PROFILES]
    assert lmi_dist in others and set(others) - set(FP8_PROFILES) == {LMI_DIST_8, "lmi-0.27.0-lmi-dist-9.0.0",
                                                                      "lmi-0.28.0-lmi-dist-10.0.0"}
    assert stated.message == (f"--quantize fp8 writes a ModelOpt FP8 checkpoint, loaded by "
                              f"{', '.join(MODELOPT_FP8_PROFILES)}; not by {', '.join(others)}")
    assert stated.hint and f"--profile {lmi_dist} writes the format that one loads" in stated.hint
    stated = _loaded_by(plan_model("hf", LLAMA, quantize="fp8", profile=lmi_dist))
    assert stated.message.startswith("--quantize fp8 writes a compressed-tensors checkpoint, loaded by "
                                     f"{lmi_dist}; not by ")


def test_hf_awq_of_a_model_no_profile_loads_says_so_before_the_build(plan_model: Planner) -> None:
    """AutoAWQ needs the AWQ scales folded, which ModelOpt does not do for Mistral: without --profile
    the plan keeps ModelOpt's format and says that no LMI container loads it."""
    plan = plan_model("hf", MISTRAL, quantize="awq")
    assert isinstance(plan.build, HfBuild) and plan.build.export_format == "modelopt_hf"
    stated = _loaded_by(plan)
    assert "W4A16_AWQ checkpoint, which no LMI container profile lmi-build knows loads" in stated.message
    assert stated.hint and "--quantize gptq or fp8" in stated.hint


def test_hf_plan_refuses_a_profile_that_does_not_load_its_checkpoint(plan_model: Planner,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's format and verify's rule are the same (profiles.loads_format): a profile whose data
    says it takes --quantize fp8 as ModelOpt's format but whose ModelOpt loader lacks FP8 is
    refused at plan time, naming the profiles that load the checkpoint."""
    import lmi_build.targets.hf.plan as hf_plan

    profile = "lmi-0.35.0-vllm-0.11.1"
    real = hf_plan.load_profiles()
    broken = [p.model_copy(update={"modelopt_algos": ()}) if p.name == profile else p for p in real]
    monkeypatch.setattr(hf_plan, "load_profiles", lambda: broken)
    monkeypatch.setattr(hf_plan, "get_profile", lambda name: next(p for p in broken if p.name == name))
    plan = plan_model("hf", LLAMA, quantize="fp8", profile=profile)
    error = next(m for m in plan.errors if m.code == "hf_format")
    others = [name for name in MODELOPT_FP8_PROFILES if name != profile]
    assert error.message == (f"--quantize fp8 writes a ModelOpt FP8 checkpoint, which {profile} does not load; "
                             f"loaded by {', '.join(others)}")
    assert error.hint == f"use --profile {' or '.join(others)}"


def test_neuronx_container_spelling_static_int8_is_int8(plan_model: Planner) -> None:
    """option.quantize=static_int8 is the one spelling DJL's Neuron properties take (tnx_properties.py
    TnXQuantizeMethods, 0.28.0-dlc..0.30.0-dlc:45; it sets load_in_8bit at :215-216 / 0.30 :221-222), and
    the one lmi-build writes; DJL's own gpt2-quantize integration test sets it (tests/fixtures/neuron-corpus)."""
    plan = plan_model("neuronx", LLAMA, option=("option.quantize=static_int8",))
    assert plan.valid, plan.errors
    assert plan.quantization.method == "int8" and plan.options["option.quantize"] == "static_int8"


def test_a_default_cast_of_the_models_dtype_is_said_naming_both_and_why(plan_model: Planner) -> None:
    """Issue 42 item 7: Llama-3.1-8B-Instruct is bf16; without --dtype it is built in LMI's default fp16."""
    llama31 = "meta-llama--Llama-3.1-8B-Instruct"
    for target in ("trtllm", "hf"):
        plan = plan_model(target, llama31, tp="1", max_output_len=1024)
        warning = next(w for w in plan.warnings if w.code == "dtype_cast")
        assert warning.message.startswith("the model's weights are bf16 (config.json torch_dtype bfloat16); the build "
                                          "casts them to fp16: LMI's default when option.dtype is unset")
        assert "configurations.md:94" in warning.message and warning.hint is not None
        assert "--dtype bf16" in warning.hint
        chosen = plan_model(target, llama31, tp="1", max_output_len=1024, dtype="fp16")
        assert "dtype_cast" not in warning_codes(chosen)  # the user's choice is not news
    # fp16 weights built in fp16: nothing to say
    assert "dtype_cast" not in warning_codes(plan_model("trtllm", "meta-llama--Llama-2-7b-hf", tp="1"))
