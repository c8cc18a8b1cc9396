"""What TensorRT-LLM makes of an already-quantized (AutoAWQ, GPTQ, FP8, ModelOpt) input: the quantization
rules the trtllm target gives the planner (``planning.quantization.QuantizationRules``)."""

from __future__ import annotations

from lmi_build.model.spec import PreQuantization
from lmi_build.planning.quantization import QuantizationRules
from lmi_build.types import PlanMessage


def prequantized_problem(pre: PreQuantization) -> PlanMessage | None:
    """Why TensorRT-LLM cannot convert this already-quantized input as it is, or None."""
    method = pre.method.lower()
    if method == "gptq" and pre.desc_act:
        return PlanMessage(
            code="gptq_desc_act",
            message="this GPTQ checkpoint uses desc_act=true (act-order), which TensorRT-LLM cannot load",
            hint="use a GPTQ export made with desc_act=false, or the unquantized model with --quantize gptq",
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


QUANTIZATION = QuantizationRules(target="trtllm", prequantized_problem=prequantized_problem,
                                 prequantized_algo=prequantized_algo)
