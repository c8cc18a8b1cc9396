"""``lmi-build trtllm``: its help, and its own build flags (``TrtllmRun``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmi_build.building.run_settings import BuildCommand, RunnerKind, RunSettings, Until, build_flag


@dataclass(frozen=True)
class TrtllmRun(RunSettings):
    """How a trtllm build runs: where the engine build runs, and what it reuses from an earlier one."""

    until: Until = build_flag(
        "artifact", "--until",
        "Stop after the TensorRT-LLM checkpoint (runs anywhere torch runs), or build the artifact.")
    runner: RunnerKind = build_flag(
        "local", "--runner",
        "Where the engine build runs: local (trtllm-build on PATH), docker (the profile's LMI image), "
        "script (write build-engines.sh for a GPU host; nothing runs).")
    checkpoint: Path | None = build_flag(None, "--checkpoint",
                                         "Reuse this TensorRT-LLM checkpoint instead of converting.")
    engine_dir: Path | None = build_flag(
        None, "--engine-dir", "Package engines already built (e.g. by build-engines.sh) instead of building them.")
    trtllm_examples: Path | None = build_flag(
        None, "--trtllm-examples",
        "TensorRT-LLM examples/ checkout at the profile's tag (vendor conversion scripts only).")
    step_timeout_s: int | None = build_flag(
        None, "--step-timeout",
        "Seconds each vendor step may run before it is killed (default: 3 h convert, 4 h engine build).", min=1)

    def input_dirs(self) -> dict[str, Path | None]:
        return {"the checkpoint": self.checkpoint, "the engine directory": self.engine_dir}


COMMAND = BuildCommand(
    help="Build TensorRT-LLM engines for the LMI TensorRT-LLM container (checkpoint on this host, engines by the "
         "profile's TensorRT-LLM).",
    epilog="""[bold]Examples[/bold]

  lmi-build trtllm --model meta-llama/Llama-2-7b-hf --tp 2 \\
      --max-input-len 2048 --quantize awq --output ./out

  lmi-build trtllm --model demo:tiny-llama --until checkpoint --output ./ckpt

  # write bundle/build-engines.sh, then run it on a GPU host:
  lmi-build trtllm --model ./llama --runner script --output ./bundle

Exit status: 0 done, 2 invalid plan, 3 stopped after the checkpoint (no TensorRT-LLM toolchain here), 1 other errors.""",
    settings=TrtllmRun)
