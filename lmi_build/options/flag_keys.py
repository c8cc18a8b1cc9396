"""Which command-line flag sets which LMI option (used by the planner and the flag help generator)."""

from __future__ import annotations

# The dedicated flags that set an option: flag -> serving.properties key. Their help text and
# bounds come from these keys' table entries (lmi_build/cli/option_flags.py is generated from both).
FLAG_KEYS: dict[str, str] = {
    "--tp": "option.tensor_parallel_degree",
    "--pp": "option.pipeline_parallel_degree",
    "--dtype": "option.dtype",
    "--quantize": "option.quantize",
    "--max-input-len": "option.max_input_len",
    "--max-output-len": "option.max_output_len",
    "--max-batch-size": "option.max_rolling_batch_size",
    "--n-positions": "option.n_positions",
    "--context-length-estimate": "option.context_length_estimate",
    "--revision": "option.revision",
    "--trust-remote-code": "option.trust_remote_code",
}
