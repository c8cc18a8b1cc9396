"""Quantization planning (pure Python): methods table, options, calibration text, pre-quantized inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmi_build.core.errors import OptionError, SourceError
from lmi_build.core.types import PlanMessage
from lmi_build.model.normalize import read_spec
from lmi_build.model.spec import ModelSpec
from lmi_build.options.resolve import OptionInputs, option_spec, resolve_options
from lmi_build.planning import calibration_text
from lmi_build.planning.plan import QuantizationPlan
from lmi_build.planning.quantization import (
    KV_CACHE_ALGOS,
    METHODS,
    canonical_method,
    plan_quantization,
    split_messages,
    tp_group_problem,
    vendor_smoothquant_algo,
)
from lmi_build.targets import get_target
from tests.fixtures_quantize import resolved_options
from tests.paths import REPO_ROOT

TRTLLM_RULES = get_target("trtllm").quantization

LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rope_theta": 10000.0, "torch_dtype": "float16",
}


def _spec(**changes: Any) -> ModelSpec:
    return read_spec({**LLAMA, **changes})


def _plan(method: str | None, options: dict[str, str] | None = None, *, spec: ModelSpec | None = None,
          target: str = "trtllm", calib_file: Path | None = None,
          route: str = "modelopt") -> tuple[QuantizationPlan, list[PlanMessage], list[PlanMessage]]:
    plan, messages = plan_quantization(method, resolved_options(options or {}), spec or _spec(),
                                       get_target(target).quantization, calib_file, checkpoint_route=route)  # type: ignore[arg-type]
    errors, warnings = split_messages(messages)
    return plan, errors, warnings


def _codes(messages: list[PlanMessage]) -> list[str]:
    return [m.code for m in messages]


def _resolution_errors(options: dict[str, str]) -> list[PlanMessage]:
    """A value that does not parse is resolution's error, reported there once; the planner only
    ever sees typed values (``resolved_options`` refuses such a value outright)."""
    inputs = OptionInputs(cli={f"option.{key}": (value, f"--option {key}") for key, value in options.items()})
    errors = resolve_options(inputs, target="trtllm").errors
    with pytest.raises(ValueError):
        resolved_options(options)
    return errors


@pytest.mark.parametrize(("method", "algo", "calib_size", "group"), [
    ("smoothquant", "W8A8_SQ_PER_CHANNEL", 64, None),
    ("awq", "W4A16_AWQ", 32, 128),
    ("fp8", "FP8", 64, None),
    ("int8_wo", "W8A16", None, None),
    ("int4_wo", "W4A16_AWQ", None, 128),
])
def test_each_method_plans_its_algo_and_calibration(method: str, algo: str, calib_size: int | None,
                                                     group: int | None) -> None:
    plan, errors, warnings = _plan(method)
    assert errors == [] and warnings == []
    assert plan.method == method and plan.quant_algo == algo and plan.group_size == group
    if calib_size is None:
        assert plan.calibration is None
    else:
        assert plan.calibration is not None
        assert plan.calibration.size == calib_size
        assert plan.calibration.dataset == f"builtin:{calibration_text.BUILTIN_NAME}"
        assert plan.calibration.dataset_digest == calibration_text.load_builtin().digest
        batch = 8 if method == "awq" else 1  # AWQ's CPU cost is per forward call
        assert (plan.calibration.max_seq_len, plan.calibration.batch_size, plan.calibration.seed) == (512, batch, 1234)


def test_no_quantization_is_an_empty_plan() -> None:
    for method in (None, "none", ""):
        plan, errors, warnings = _plan(method)
        assert plan == QuantizationPlan() and errors == [] and warnings == []


def test_option_quantize_is_read_and_the_flag_wins() -> None:
    assert _plan(None, {"quantize": "awq"})[0].method == "awq"
    assert _plan("fp8", {"quantize": "awq"})[0].method == "fp8"


@pytest.mark.parametrize(("alias", "name"), [("int4_awq", "awq"), ("W8A16", "int8_wo"), ("SmoothQuant", "smoothquant"),
                                             ("w4a16", "int4_wo")])
def test_aliases(alias: str, name: str) -> None:
    assert canonical_method(alias) == name
    assert _plan(alias)[0].method == name


def test_unknown_method_lists_the_choices() -> None:
    _, errors, _ = _plan("bitsandbytes8")
    assert _codes(errors) == ["quantize_unknown"]
    assert errors[0].hint is not None and all(name in errors[0].hint for name in METHODS)


def test_smoothquant_options() -> None:
    plan, errors, warnings = _plan("smoothquant", {"smoothquant_alpha": "0.5", "multi_query_mode": "true"})
    assert errors == [] and warnings == []
    assert (plan.smoothquant_alpha, plan.multi_query_mode, plan.per_token, plan.per_channel) == (0.5, True, False, False)
    assert _plan("smoothquant")[0].smoothquant_alpha == 0.8


@pytest.mark.parametrize("alpha", ["0", "1.5", "-0.1", "high"])
def test_smoothquant_alpha_out_of_range(alpha: str) -> None:
    errors = _resolution_errors({"quantize": "smoothquant", "smoothquant_alpha": alpha})
    assert _codes(errors) == ["invalid_value"]
    assert alpha in errors[0].message and errors[0].message.startswith("option.smoothquant_alpha=")


def test_per_token_is_recorded_with_a_warning_on_the_modelopt_route() -> None:
    plan, errors, warnings = _plan("smoothquant", {"smoothquant_per_token": "true", "smoothquant_per_channel": "true"})
    assert errors == [] and _codes(warnings) == ["smoothquant_granularity"]
    assert plan.quant_algo == "W8A8_SQ_PER_CHANNEL" and plan.per_token is True and plan.per_channel is True


@pytest.mark.parametrize(("per_channel", "per_token", "algo"), [
    (True, True, "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"),
    (True, False, "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN"),
    (False, True, "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN"),
    (False, False, "W8A8_SQ_PER_TENSOR_PLUGIN"),
])
def test_vendor_route_smoothquant_plugin_variants(per_channel: bool, per_token: bool, algo: str) -> None:
    assert vendor_smoothquant_algo(per_channel, per_token) == algo
    options = {"smoothquant_per_channel": str(per_channel).lower(), "smoothquant_per_token": str(per_token).lower()}
    plan, errors, warnings = _plan("smoothquant", options, route="vendor")
    assert plan.quant_algo == algo and errors == [] and warnings == []


def test_vendor_route_refuses_modelopt_only_methods() -> None:
    assert _plan("int4_wo", route="vendor")[0].quant_algo == "W4A16"
    for method in ("awq", "fp8"):
        assert _codes(_plan(method, route="vendor")[1]) == ["quantize_route_unsupported"]


def test_awq_options() -> None:
    plan, errors, _ = _plan("awq", {"awq_format": "int4_awq", "awq_calib_size": "12", "calib_size": "99"})
    assert errors == [] and plan.calibration is not None and plan.calibration.size == 12
    errors = _resolution_errors({"quantize": "awq", "awq_format": "int8_awq"})
    assert _codes(errors) == ["invalid_value"] and "option.awq_format=int8_awq" in errors[0].message


def test_table_defaults_neither_override_nor_warn() -> None:
    from lmi_build.options.resolve import resolved_value
    from lmi_build.options.resolved import ResolvedOptions, Source

    values = {
        "option.awq_calib_size": resolved_value("option.awq_calib_size", "32", Source.DEFAULT),
        "option.smoothquant_alpha": resolved_value("option.smoothquant_alpha", "0.8", Source.DEFAULT),
        "option.calib_size": resolved_value("option.calib_size", "8", Source.CLI),
    }
    plan, messages = plan_quantization("awq", ResolvedOptions(values=values), _spec(), TRTLLM_RULES, None)
    assert messages == [] and plan.calibration is not None and plan.calibration.size == 8
    _, messages = plan_quantization("fp8", ResolvedOptions(values=values), _spec(), TRTLLM_RULES, None)
    assert messages == []


def test_options_of_another_method_are_warned_about() -> None:
    _, errors, warnings = _plan("fp8", {"smoothquant_alpha": "0.5", "awq_calib_size": "8"})
    assert errors == [] and _codes(warnings) == ["quantize_option_ignored"]
    assert "option.smoothquant_alpha" in warnings[0].message and "option.awq_calib_size" in warnings[0].message


@pytest.mark.parametrize(("key", "value"), [("calib_size", "0"), ("calib_size", "many"), ("calib_max_seq_len", "4"),
                                            ("calib_batch_size", "-1"), ("calib_seed", "-3")])
def test_invalid_calibration_options(key: str, value: str) -> None:
    errors = _resolution_errors({"quantize": "fp8", key: value})
    assert _codes(errors) == ["invalid_value"] and f"option.{key}={value}" in errors[0].message


def test_calibration_options_and_capping() -> None:
    plan, errors, _ = _plan("fp8", {"calib_size": "10", "calib_max_seq_len": "128", "calib_batch_size": "2",
                                    "calib_seed": "7"})
    assert errors == [] and plan.calibration is not None
    assert (plan.calibration.size, plan.calibration.max_seq_len, plan.calibration.batch_size,
            plan.calibration.seed) == (10, 128, 2, 7)
    available = len(calibration_text.load_builtin().samples)
    plan, errors, warnings = _plan("fp8", {"calib_size": "100000"})
    assert errors == [] and _codes(warnings) == ["calib_size_capped"]
    assert plan.calibration is not None and plan.calibration.size == available


@pytest.mark.parametrize(("value", "algo"), [("fp8", "FP8"), ("int8", "INT8"), ("auto", None), ("fp16", None),
                                            ("bf16", None)])
def test_kv_cache_dtype(value: str, algo: str | None) -> None:
    plan, errors, _ = _plan("int8_wo", {"kv_cache_dtype": value})
    assert errors == [] and plan.kv_cache_quant_algo == algo
    # KV scales are calibrated: a weight-only method gains a calibration set only when KV is quantized.
    assert (plan.calibration is not None) == (algo is not None)


def test_kv_cache_dtype_errors() -> None:
    for value in ("int4", "INT8"):  # the table's choices are case-sensitive, as the container's
        errors = _resolution_errors({"quantize": "fp8", "kv_cache_dtype": value})
        assert _codes(errors) == ["invalid_value"] and f"option.kv_cache_dtype={value}" in errors[0].message
    assert "expected int8 (values are case-sensitive)" in _resolution_errors({"kv_cache_dtype": "INT8"})[0].message
    assert set(KV_CACHE_ALGOS) == set(option_spec("kv_cache_dtype").choices)  # type: ignore[union-attr]
    assert _codes(_plan(None, {"kv_cache_dtype": "fp8"})[1]) == ["kv_cache_needs_quantize"]


def test_group_size_must_divide_every_input_dimension() -> None:
    spec = _spec(intermediate_size=11000)
    assert _codes(_plan("awq", spec=spec)[1]) == ["group_size_shape"]
    assert "intermediate_size=11000" in _plan("int4_wo", spec=spec)[1][0].message
    assert _plan("int8_wo", spec=spec)[1] == []


def test_tp_must_keep_whole_groups_per_rank() -> None:
    plan = _plan("awq")[0]  # intermediate 11008 = 86 x 128
    assert tp_group_problem(plan, _spec(), 1) is None
    assert tp_group_problem(plan, _spec(), 2) is None  # 5504 = 43 x 128
    problem = tp_group_problem(plan, _spec(), 4)  # 2752 = 21.5 x 128
    assert problem is not None and problem.code == "group_size_tp" and "intermediate_size/tp=2752" in problem.message
    assert tp_group_problem(plan, _spec(intermediate_size=14336), 8) is None
    assert tp_group_problem(_plan("fp8")[0], _spec(), 8) is None


def test_neuronx_only_takes_load_time_int8() -> None:
    assert _plan("int8", target="neuronx")[0].method == "int8"
    assert _codes(_plan("awq", target="neuronx")[1]) == ["quantize_target"]


# --- pre-quantized inputs -------------------------------------------------------------------

AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
GPTQ_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}


def test_prequantized_input_is_recorded_not_requantized() -> None:
    plan, errors, warnings = _plan(None, spec=_spec(quantization_config=AWQ_CONFIG))
    assert errors == [] and warnings == []
    assert plan.method is None and plan.calibration is None
    assert plan.pre_quantized is not None and plan.pre_quantized.method == "awq"
    assert (plan.quant_algo, plan.group_size) == ("W4A16_GPTQ", 128)  # convert_checkpoint's AutoAWQ mapping
    assert _plan(None, spec=_spec(quantization_config=AWQ_CONFIG), target="hf")[0].quant_algo is None


def test_quantizing_a_quantized_model_is_an_error() -> None:
    _, errors, _ = _plan("awq", spec=_spec(quantization_config=GPTQ_CONFIG))
    assert _codes(errors) == ["already_quantized"]


def test_gptq_desc_act_refused_for_trtllm_only() -> None:
    spec = _spec(quantization_config={**GPTQ_CONFIG, "desc_act": True})
    assert spec.pre_quantization is not None
    problem = TRTLLM_RULES.prequantized_problem(spec.pre_quantization)
    assert problem is not None and problem.code == "gptq_desc_act"
    assert get_target("hf").quantization.prequantized_problem(spec.pre_quantization) is None
    plain = _spec(quantization_config=GPTQ_CONFIG).pre_quantization
    assert plain is not None and TRTLLM_RULES.prequantized_problem(plain) is None
    assert _codes(_plan(None, spec=_spec())[1]) == []
    assert _codes(_plan(None, spec=spec)[1]) == ["gptq_desc_act"]


def test_prequantized_bits() -> None:
    spec = _spec(quantization_config={**GPTQ_CONFIG, "bits": 3})
    assert _codes(_plan(None, spec=spec)[1]) == ["prequantized_bits"]
    assert _plan(None, spec=_spec(quantization_config={**GPTQ_CONFIG, "bits": 8}))[0].quant_algo == "W8A16_GPTQ"


# --- calibration text -----------------------------------------------------------------------

def test_builtin_set_is_large_and_varied() -> None:
    text = calibration_text.load_builtin()
    assert len(text.samples) >= 100
    assert len(set(text.samples)) == len(text.samples)
    assert any("def " in s for s in text.samples) and any('"' in s for s in text.samples)
    assert text.digest.startswith("sha256:")


def test_txt_paragraphs_and_lines(tmp_path: Path) -> None:
    paragraphs = tmp_path / "p.txt"
    paragraphs.write_text("first line\nstill first\n\n  \nsecond\n\n\nthird\n")
    assert calibration_text.load_file(paragraphs).samples == ("first line\nstill first", "second", "third")
    lines = tmp_path / "l.txt"
    lines.write_text("one\ntwo\n\nthree")  # has a blank line -> paragraphs
    assert calibration_text.load_file(lines).samples == ("one\ntwo", "three")
    lines.write_text("one\ntwo\nthree\n")
    assert calibration_text.load_file(lines).samples == ("one", "two", "three")


def test_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "alpha", "id": 1}) + "\n\n" + json.dumps({"text": "beta"}) + "\n")
    text = calibration_text.load_file(path)
    assert text.samples == ("alpha", "beta") and text.dataset == "file:c.jsonl"
    path.write_text(json.dumps({"body": "no text field"}) + "\n")
    with pytest.raises(OptionError, match=r"c\.jsonl:1 has no string 'text' field"):
        calibration_text.load_file(path)
    path.write_text("{not json\n")
    with pytest.raises(OptionError, match="not valid JSON"):
        calibration_text.load_file(path)


def test_bad_calibration_files(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="calibration file not found"):
        calibration_text.load_file(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    with pytest.raises(OptionError, match="has no text samples"):
        calibration_text.load_file(empty)
    other = tmp_path / "data.csv"
    other.write_text("a,b\n")
    with pytest.raises(OptionError, match="unsupported extension"):
        calibration_text.load_file(other)


def test_calibration_file_in_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("\n\n".join(f"paragraph {i}" for i in range(5)))
    plan, errors, warnings = _plan("smoothquant", calib_file=path)
    assert errors == [] and _codes(warnings) == ["calib_size_capped"]
    assert plan.calibration is not None
    assert plan.calibration.dataset == "file:mine.txt" and plan.calibration.size == 5
    assert plan.calibration.dataset_digest == calibration_text.load_file(path).digest
    # A missing file is a plan error (one line), not an exception.
    _, errors, _ = _plan("smoothquant", calib_file=tmp_path / "nope.txt")
    assert _codes(errors) == ["calib_data"] and "nope.txt" in errors[0].message


def test_selection_depends_on_the_seed_only() -> None:
    samples = tuple(f"s{i}" for i in range(50))
    first = calibration_text.select(samples, 10, 1234)
    assert first == calibration_text.select(samples, 10, 1234)
    assert first != calibration_text.select(samples, 10, 99)
    assert len(set(first)) == 10 and calibration_text.select(samples, 500, 1) != []


def test_planning_imports_no_torch() -> None:
    code = ("import sys; import lmi_build.planning.quantization, lmi_build.quantize.export; "
            "bad = [m for m in ('torch', 'transformers', 'modelopt') if m in sys.modules]; print(bad)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_gptq_on_a_large_model_warns_about_cpu_time() -> None:
    plan, errors, warnings = _plan("gptq", target="hf")
    assert not errors and [w.code for w in warnings] == ["gptq_cpu_slow"]
    assert (plan.quant_algo, plan.group_size, plan.calibration and plan.calibration.size) == ("W4A16_GPTQ", 128, 64)
    tiny = _spec(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=8, vocab_size=1024)
    assert not _plan("gptq", spec=tiny, target="hf")[2]
    assert not _plan("awq")[2]


@pytest.mark.parametrize("route", ["modelopt", "vendor"])
def test_trtllm_refuses_to_quantize_gptq(route: str) -> None:
    """TensorRT-LLM makes W4A16_GPTQ only by converting a GPTQ checkpoint; ModelOpt's GPTQ export is
    labelled W4A16_AWQ, which option.quantize=gptq contradicts: one line that says what to do instead."""
    plan, errors, warnings = _plan("gptq", route=route)
    assert plan == QuantizationPlan() and warnings == [] and _codes(errors) == ["quantize_target"]
    assert "\n" not in errors[0].message and "W4A16_GPTQ" in errors[0].message
    assert errors[0].hint is not None and "--quantize awq" in errors[0].hint
    # a GPTQ model given as input still converts (to W4A16_GPTQ)
    converted, errors, _ = _plan(None, spec=_spec(quantization_config=GPTQ_CONFIG))
    assert not errors and converted.quant_algo == "W4A16_GPTQ"


def test_the_gptq_refusal_holds_against_the_vendor_quantize_script() -> None:
    """The refusal's premise, in the table extracted from TensorRT-LLM itself (not written by lmi-build):
    no release's examples/quantization/quantize.py offers a GPTQ --qformat."""
    facts = json.loads((REPO_ROOT / "tests" / "vendor" / "trtllm" / "script_flags.json").read_text())
    qformats = {release: facts["releases"][release]["scripts"]["examples/quantization/quantize.py"]["flags"]
                ["qformat"]["choices"] for release in facts["releases"]
                if "examples/quantization/quantize.py" in facts["releases"][release].get("scripts", {})}
    assert {"0.7.1", "0.12.0"} <= set(qformats) and all("int4_awq" in choices for choices in qformats.values())
    assert not [(release, c) for release, choices in qformats.items() for c in choices if "gptq" in c]


def test_hf_gptq_is_planned_in_the_gptq_format_not_the_awq_label() -> None:
    from lmi_build.targets.hf.plan import export_format

    hf, errors, _ = _plan("gptq", target="hf")
    assert not errors and hf.quant_algo == "W4A16_GPTQ" and export_format(hf) == "gptq"
    # without --profile: the AutoAWQ format every hf profile loads, where ModelOpt can fold the AWQ
    # scales for the model type; ModelOpt's own format elsewhere (issue 30 item 8)
    assert export_format(_plan("awq", target="hf")[0], model_type="llama") == "awq"
    assert export_format(_plan("awq", target="hf")[0], model_type="mistral") == "modelopt_hf"
    assert export_format(_plan(None, target="hf")[0]) == "hf"
