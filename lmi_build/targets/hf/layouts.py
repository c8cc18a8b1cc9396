"""The ``hf`` layout: a Hugging Face checkpoint the LMI container loads from the directory it is in.

Files: ``config.json``, safetensors weights (+ ``model.safetensors.index.json``), with a ModelOpt
unified export ``hf_quant_config.json``, and the tokenizer/chat/generation files. serving.properties
gets ``engine=Python`` and no ``option.model_id`` (the container then loads the artifact dir).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.packager import CARRIED_PATTERNS, carry_source_files, matches_any, trust_remote_code
from lmi_build.core.errors import StepError
from lmi_build.core.fs import link_or_copy
from lmi_build.core.reading import read_json_file
from lmi_build.core.types import PlanMessage
from lmi_build.model.safetensors_header import read_checked_header
from lmi_build.planning.context import written_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.hf.options import HfOptions

INDEX_NAME = "model.safetensors.index.json"
# Files taken from the produced checkpoint (anything else there, e.g. *.bin, stays out).
PRODUCED_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "hf_quant_config.json",
                  "generation_config.json")
Report = Callable[[str, str, str], None]  # (code, message, hint)
# Any one of these makes a tokenizer the container can load.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                   "spiece.model")




def read_safetensors_header(path: Path) -> dict[str, object]:
    """The checked JSON header of a safetensors file; ValueError when it breaks the format."""
    return read_checked_header(path)[0]


class HfLayout:
    name = "hf"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        weights = sorted(produced.glob("*.safetensors"))
        if not weights:
            found = ", ".join(sorted(p.name for p in produced.iterdir())[:8]) if produced.is_dir() else "nothing"
            raise StepError(f"no safetensors weights in the produced checkpoint (found: {found})",
                            hint="the hf layout ships safetensors only: convert the weights with "
                                 "save_pretrained(safe_serialization=True)")
        for entry in sorted(produced.iterdir(), key=lambda p: p.name):
            if entry.is_file() and matches_any(entry.name, PRODUCED_FILES + CARRIED_PATTERNS):
                link_or_copy(entry, staging / entry.name)
        if not (staging / "config.json").exists():
            # A checkpoint without its config (a bare weights export) takes the source's.
            link_or_copy(source_dir / "config.json", staging / "config.json")
        carry_source_files(source_dir, staging, trust_remote_code=trust_remote_code(plan))

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return written_text(HfOptions(engine="Python"))

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        problems: list[PlanMessage] = []

        def problem(code: str, message: str, hint: str) -> None:
            problems.append(PlanMessage(code=code, message=message, hint=hint))

        config_path = artifact_dir / "config.json"
        config: dict[str, object] = {}
        if not config_path.is_file():
            problem("hf_config", "config.json is missing", "the container cannot load the model: rebuild")
        else:
            try:
                loaded = read_json_file(config_path, what="config.json")
                config = loaded if isinstance(loaded, dict) else {}
            except ValueError as error:
                problem("hf_config", f"config.json is not valid JSON ({error})", "rebuild the artifact")
        self._check_weights(artifact_dir, problem)
        if not any((artifact_dir / name).is_file() for name in TOKENIZER_FILES):
            problem("tokenizer", f"no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
                    "carry the tokenizer from the source model: rebuild with its tokenizer files present")
        quant = config.get("quantization_config")
        if isinstance(quant, dict) and quant.get("quant_method") == "modelopt" and not (
            artifact_dir / "hf_quant_config.json"
        ).is_file():
            problem("hf_quant_config", "config.json says quant_method=modelopt but hf_quant_config.json is missing",
                    "rebuild: the TensorRT-LLM PyTorch backend reads the quantization from it")
        return problems

    @staticmethod
    def _check_weights(artifact_dir: Path, report: Report) -> None:
        index_path = artifact_dir / INDEX_NAME
        shards = sorted(artifact_dir.glob("*.safetensors"))
        headers: dict[str, dict[str, object]] = {}
        for shard in shards:
            try:
                headers[shard.name] = read_safetensors_header(shard)
            except (OSError, ValueError) as error:
                report("safetensors", f"{shard.name} is not a valid safetensors file ({error})", "rebuild the artifact")
        if index_path.is_file():
            try:
                weight_map = read_json_file(index_path, what=INDEX_NAME)["weight_map"]
            except (ValueError, KeyError, TypeError) as error:
                report("safetensors_index", f"{INDEX_NAME} is unreadable ({error})", "rebuild the artifact")
                return
            for shard_name in sorted(set(weight_map.values())):
                if not (artifact_dir / shard_name).is_file():
                    report("safetensors_shard", f"shard {shard_name} listed in {INDEX_NAME} is missing",
                           "re-download or rebuild the artifact")
            for tensor, shard_name in sorted(weight_map.items()):
                header = headers.get(shard_name)
                if header is not None and tensor not in header:
                    report("safetensors_tensor", f"tensor {tensor} is not in {shard_name} as {INDEX_NAME} says",
                           "rebuild the artifact")
                    break
        elif not shards:
            report("safetensors", "no *.safetensors weights", "rebuild the artifact")
        elif len(shards) > 1:
            report("safetensors_index", f"{len(shards)} safetensors shards but no {INDEX_NAME}",
                   "rebuild the artifact: the loader needs the index to find the shards")


# The layouts this target packages, by name (``Target.layouts()``).
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (HfLayout(),)}
