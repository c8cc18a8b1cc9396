"""What TensorRT-LLM makes of an already-quantized (AutoAWQ, GPTQ, FP8, ModelOpt) input: the quantization
rules the trtllm target gives the planner (``planning.quantization.QuantizationRules``)."""

from __future__ import annotations

from lmi_build.core.types import PlanMessage
from lmi_build.model.spec import PreQuantization
from lmi_build.planning.quantization import QuantizationRules


def prequantized_problem(pre: PreQuantization) -> PlanMessage | None:
    """Why TensorRT-LLM cannot convert this already-quantized input as it is, or None."""
    method = pre.method.lower()
    if method == "gptq" and pre.desc_act:
        return PlanMessage(
            code="gptq_desc_act",
            message="this GPTQ checkpoint uses desc_act=true (act-order), which TensorRT-LLM cannot load",
            hint="use a GPTQ export made with desc_act=false, or the unquantized model with --quantize awq",
        )
    if method in ("awq", "gptq") and pre.bits not in (None, 4, 8):
        return PlanMessage(
            code="prequantized_bits",
            message=f"this {method.upper()} checkpoint has {pre.bits}-bit weights; TensorRT-LLM takes 4 or 8",
            hint="use a 4-bit or 8-bit export of the model",
        )
    if method == "awq" and pre.bits == 8:
        return PlanMessage(
            code="prequantized_bits",
            message="this AWQ checkpoint has 8-bit weights; TensorRT-LLM loads AutoAWQ only as 4-bit",
            hint="use a 4-bit AWQ export of the model",
        )
    return None


def prequantized_algo(pre: PreQuantization) -> str | None:
    """The TRT-LLM quant_algo a pre-quantized input converts to (convert_checkpoint maps AutoAWQ to
    W4A16_GPTQ with use_autoawq); None when unknown."""
    method = pre.method.lower()
    if method in ("awq", "gptq"):
        return "W8A16_GPTQ" if pre.bits == 8 else "W4A16_GPTQ"
    if method == "fp8":
        return "FP8"
    return pre.quant_algo


# TensorRT-LLM makes W4A16_GPTQ only by converting a GPTQ checkpoint, in no release by quantizing:
# - examples/quantization/quantize.py --qformat has no GPTQ choice at 0.7.1 (80bc0751:100) to the 0.12-era
#   main a681853d:53 (tests/vendor/trtllm/script_flags.json; the 0.12.0 tag 28fb9aac is not stored: inferred),
#   nor in the stored later copy (059c97c1:66-80,
#   nvfp4|fp8|int8_sq|int4_awq|w4a8_awq|int8_wo|int4_wo|full_prec); tensorrt_llm/quantization/
#   quantize_by_modelopt.py quant_cfg_choices() (585c7565:113-127) has no GPTQ config either;
# - tensorrt_llm/models/modeling_utils.py (01ea6d79) QuantConfig._get_modelopt_qformat maps no W4A16_GPTQ
#   ("We don't use Modelopt for quantization algorithm ..."): W4A16_GPTQ comes from convert_checkpoint.py
#   --use_weight_only --weight_only_precision int4_gptq --per_group (steps._prequantized_args).
# ModelOpt 0.47's own GPTQ exports as W4A16_AWQ (modelopt/torch/export/quant_utils.py:521-526 every 4-bit
# block quantizer is int4_awq, :711-717 int4_awq -> W4A16_AWQ), which contradicts option.quantize=gptq.
GPTQ_REFUSED = PlanMessage(
    code="quantize_target",
    message="GPTQ quantization is not available for trtllm: TensorRT-LLM's quantize.py has no GPTQ format; it makes "
            "W4A16_GPTQ engines only by converting a GPTQ checkpoint",
    hint="use --quantize awq (INT4 weights in groups of 128 too: W4A16_AWQ), or start from a GPTQ model (desc_act=false), "
         "which convert_checkpoint.py converts",
)

QUANTIZATION = QuantizationRules(target="trtllm", prequantized_problem=prequantized_problem,
                                 prequantized_algo=prequantized_algo, refused_methods={"gptq": GPTQ_REFUSED})
