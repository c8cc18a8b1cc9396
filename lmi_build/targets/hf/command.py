"""``lmi-build hf``: its help (it takes no build flags of its own)."""

from __future__ import annotations

from lmi_build.building.run_settings import BuildCommand

COMMAND = BuildCommand(
    help="Build a Hugging Face checkpoint artifact (optionally quantized with ModelOpt).",
    epilog="""[bold]Examples[/bold]

  lmi-build hf --model demo:tiny-llama --quantize awq \\
      --output ./out/tiny-llama-awq

  lmi-build hf --model demo:tiny-llama --quantize awq \\
      --profile lmi-0.35.0-vllm-0.11.1 --output ./out/tiny-awq-vllm

  lmi-build hf --model mistralai/Mistral-7B-v0.1 --dtype bf16 \\
      --output ./out/mistral --publish s3://bucket/mistral/

Exit status: 0 done, 2 invalid plan, 1 other errors.""")
