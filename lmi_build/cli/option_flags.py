"""Help text, bounds and choices of the flags that set an LMI option, by option key: GENERATED from
the option table (lmi_build/data/options.toml) and the values the build makes (flag_help.build_choices)
by `python -m lmi_build.cli.flag_help`; do not edit.

Generated, not read from the table here, because every `lmi-build` start imports this module
(`--help` included): reading options.toml would add about 20 ms (tomllib's import, then the
parse) to the ~70 ms of `import lmi_build.cli`, where these literals take ~0.2 ms (measured with
`python -X importtime -c "import lmi_build.cli"`). tests/options/test_options_flag_help.py fails on drift.
"""

from __future__ import annotations

HELP: dict[str, str] = {
    "option.revision": "Branch, tag or commit hash of a Hugging Face Hub model. Sets option.revision.",
    "option.tensor_parallel_degree": "Number of devices the model is sharded over; max = all GPUs (or NeuronCores) of the instance; -1 = all (HF Accelerate). Default: 1; trtllm: max. Sets option.tensor_parallel_degree.",
    "option.pipeline_parallel_degree": "Number of pipeline stages the layers are split into (world size = tensor x pipeline parallel degree). Default: 1 (trtllm, hf). Sets option.pipeline_parallel_degree.",
    "option.dtype": "Data type the weights are built in; bf16 needs A10G/A100 (G5, P4d) or newer. One of: fp16, bf16, fp32. Default: fp16. Sets option.dtype.",
    "option.quantize": "Quantization the build applies. One of: trtllm: awq, gptq, smoothquant, fp8, int8_wo, int4_wo; neuronx: int8, static_int8; hf: awq, gptq, fp8. Sets option.quantize.",
    "option.max_input_len": "Longest prompt in tokens the engine is compiled for (LMI 0.25: Llama 512, Falcon 1024). Default: 1024 (trtllm). Sets option.max_input_len.",
    "option.max_output_len": "Most tokens generated per request the engine is compiled for. Default: the profile's: LMI 0.33+ (trtllm-build takes max_seq_len from the model) the model's max positions minus max_input_len; older profiles 512, lowered to fit the model's positions (trtllm). Sets option.max_output_len.",
    "option.max_rolling_batch_size": "Most concurrent requests fed to the model (DeepSpeed default 4); becomes TRT-LLM max_batch_size (the TRT-LLM profiles of LMI 0.28-0.30 default to 256, as their containers do) and the Neuron batch size under continuous batching. Default: 32. Sets option.max_rolling_batch_size.",
    "option.n_positions": "Total sequence length (input + output) the NEFFs are compiled for; the largest token-generation bucket. Default: what the profile's release resolves: 128 on LMI 0.26-0.29 (TnXProperties), min(max_position_embeddings, 4096) on 0.30+ (DJL's Neuron smart defaults); profiles.toml n_positions_default. Sets option.n_positions.",
    "option.context_length_estimate": "Context-encoding bucket sizes, comma-separated (e.g. 256,512,1024). Default: half of each token-generation bucket. Sets option.context_length_estimate.",
    "option.trust_remote_code": "Allow running the model's own code from the Hugging Face Hub (off by default to prevent malicious code execution); review that code first. Default: false. Sets option.trust_remote_code.",
}
MINIMUM: dict[str, int] = {
    "option.pipeline_parallel_degree": 1,
    "option.max_input_len": 1,
    "option.max_output_len": 1,
    "option.max_rolling_batch_size": 1,
    "option.n_positions": 1,
}
MAXIMUM: dict[str, int] = {}
CHOICES: dict[str, list[str]] = {
    "option.dtype": ["fp16", "bf16", "fp32"],
}
TARGET_CHOICES: dict[str, dict[str, list[str]]] = {
    "option.quantize": {"trtllm": ["awq", "gptq", "smoothquant", "fp8", "int8_wo", "int4_wo"], "neuronx": ["int8", "static_int8"], "hf": ["awq", "gptq", "fp8"]},
}
COMMAND_HELP: dict[str, dict[str, str]] = {
    "option.quantize": {"plan": "Quantization the build applies. One of: trtllm: awq, gptq, smoothquant, fp8, int8_wo, int4_wo; neuronx: int8, static_int8; hf: awq, gptq, fp8. Sets option.quantize.", "trtllm": "Quantization the build applies. One of: awq, gptq, smoothquant, fp8, int8_wo, int4_wo. Sets option.quantize.", "neuronx": "Quantization the build applies. One of: int8, static_int8. Sets option.quantize.", "hf": "Quantization the build applies. One of: awq, gptq, fp8. Sets option.quantize."},
}
