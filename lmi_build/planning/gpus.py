"""GPU facts shared by planning and verify: GPU names -> CUDA SM, and the SM each quantization
format needs. One table, so a plan and ``verify`` refuse the same hardware."""

from __future__ import annotations

import re

from lmi_build.core.errors import OptionError

# Common GPU names -> SM, so `--gpu a10g` works as well as `--gpu sm86`.
GPU_SM = {"v100": "sm70", "t4": "sm75", "a100": "sm80", "a10": "sm86", "a10g": "sm86", "l4": "sm89",
          "l40": "sm89", "l40s": "sm89", "h100": "sm90", "h200": "sm90", "b200": "sm100"}
# Minimum SM of quantization formats that need hardware support: FP8 tensor cores arrived with Ada
# and Hopper (sm89/sm90; docs/VENDOR-FACTS.md §3 "FP8 needs SM >= 89"), FP4 with Blackwell.
MIN_SM_FOR_QUANT = {"FP8": 89, "NVFP4": 100}


def normalize_sm(value: str) -> str:
    """'sm90', 'sm_90', '90', '9.0', 'compute_90', 'h100' -> 'sm90'."""
    text = value.strip().lower()
    if text in GPU_SM:
        return GPU_SM[text]
    match = re.fullmatch(r"(?:sm_?|compute_?)?(\d{2,3})", text) or re.fullmatch(r"(\d{1,2})\.(\d)", text)
    if match is None:
        raise OptionError(f"'{value}' is not a GPU SM architecture",
                          hint=f"use e.g. sm80, sm86, sm90, or a GPU name: {', '.join(sorted(GPU_SM))}")
    return "sm" + "".join(match.groups())


def sm_number(sm: str) -> int:
    return int(normalize_sm(sm).removeprefix("sm"))


def sm_requirements(quant_algo: str | None, kv_cache_quant_algo: str | None) -> list[tuple[str, int]]:
    """What in a quantization needs a minimum SM: ``[("FP8", 89), ("FP8 (KV cache)", 89)]``."""
    needs: list[tuple[str, int]] = []
    for suffix, algo in (("", quant_algo), (" (KV cache)", kv_cache_quant_algo)):
        for prefix, minimum in MIN_SM_FOR_QUANT.items():
            if algo and algo.startswith(prefix):
                needs.append((f"{algo}{suffix}", minimum))
    return needs
