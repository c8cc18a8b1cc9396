"""``lmi-build neuronx``: its help, and its own build flags (``NeuronxRun``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmi_build.building.run_settings import BuildCommand, RunnerKind, RunSettings, build_flag


@dataclass(frozen=True)
class NeuronxRun(RunSettings):
    """How a neuronx build runs: where the NEFF compile runs, or the NEFFs an earlier one compiled."""

    runner: RunnerKind = build_flag(
        "local", "--runner",
        "Where the NEFF compile runs: local (this host's Neuron SDK, or $LMI_BUILD_NEURON_PYTHON), docker (the "
        "profile's LMI Neuron image), script (write build-neffs.sh + plan.json for a Neuron host; nothing runs).")
    compiled_dir: Path | None = build_flag(
        None, "--compiled-dir",
        "Package NEFFs already compiled (the compiled/ that build-neffs.sh wrote) instead of compiling.")
    step_timeout_s: int | None = build_flag(
        None, "--step-timeout", "Seconds the NEFF compile may run before it is killed (default: 4 h).", min=1)


COMMAND = BuildCommand(
    help="Compile NEFFs for the LMI Neuron container (transformers-neuronx, exactly as the container would) and "
         "package the precompiled layout it loads without compiling.",
    epilog="""[bold]Examples[/bold]

  lmi-build neuronx --model meta-llama/Llama-2-7b-hf --tp 2 \\
      --n-positions 4096 --context-length-estimate 256,512,1024,2048 \\
      --runner docker --output ./out/llama2-inf2

  # write bundle/build-neffs.sh, then run it on a Neuron host:
  lmi-build neuronx --model ./llama --tp 2 --runner script --output ./bundle

Exit status: 0 done, 2 invalid plan, 1 other errors.""",
    settings=NeuronxRun)
