"""The Neuron artifact layouts the LMI Neuron containers load without compiling.

``neuronx-tnx`` (LMI 0.30+, DJL's TNXModelLoader; facts §5 "Precompiled layouts", ML:347-398)::

    config.json            the model's config with a ``neuron`` block (auto_cast_type, batch_size,
                           checkpoint_id, checkpoint_revision, compiler_type, compiler_version,
                           num_cores, sequence_length): DJL then skips compiling
    compiled/              flat NEFFs <sha256(hlo)[:20]>.neff, presharded *.safetensors, TNX
                           config.json (is_presharded_checkpoint), VERSION (neuronx-cc version)
    tokenizer files, serving.properties (option.n_positions always written: DJL's own default
    needs neuron-ls at start-up)

A missing ``compiled/`` crashes the container and a missing NEFF raises (no fallback to compiling),
so ``check`` looks for both.

``neuronx-legacy`` (LMI 0.28/0.29, djl-serving 0.29.0-dlc model_loader.py:319-342 load, 449-462
``safetensors_partition``)::

    config.json            the model's config with the ``neuron`` block
    checkpoint/            the HF model re-saved with save_pretrained (*.safetensors + config.json):
                           DJL loads it with NeuronAutoModelForCausalLM.from_pretrained(checkpoint/)
    compiled/              flat NEFFs and VERSION (model.load(compiled/) before to_neuron())
    tokenizer files, serving.properties

No ``*.safetensors`` at the top level: DJL would then take the directory for a plain HF model and
compile it (``set_model_format``).

``neuronx-split`` (LMI 0.27, 0.27.0-dlc model_loader.py:245-258 load, 226-236 + 325-345
``legacy_partition``): the same tree, but ``checkpoint/`` holds transformers-neuronx's split format
(``save_pretrained_split``: config.json + ``pytorch_model.bin/key_to_filename.json`` and one file per
tensor), loaded with the model type's TNX sampling class; again no top-level ``*.safetensors``.

``neuronx-optimum`` (DJL's OptimumModelLoader: 0.26/0.27 by default for its model types, 0.28+
with option.model_loader=optimum and option.partition_schema=optimum): optimum-neuron's
``save_pretrained`` (optimum-neuron v0.0.24 optimum/neuron/modeling_decoder.py:132-133, 268-326,
384-460)::

    config.json            with optimum's ``neuron`` block (task, batch_size, num_cores,
                           auto_cast_type, sequence_length, compiler_type, compiler_version,
                           checkpoint_id, checkpoint_revision): DJL then loads without exporting
                           after checking batch_size, num_cores, sequence_length against its own
    checkpoint/            the HF weights (written when exported from a local path)
    compiled/              the NEFFs
    tokenizer files, serving.properties

The NEFF names are not listed in any config TNX writes: ``save()`` names each file
``sha256(hlo.SerializeToString())[:20].neff`` and ``load()`` looks each one up by its HLO hash
(transformers-neuronx 1ade6d7 src/transformers_neuronx/base.py:39-47, 767-797); the HLO needs the
Neuron SDK to build, so ``check`` scans ``compiled/`` for well-named NEFFs instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmi_build.artifact.layout import Layout
from lmi_build.artifact.packager import carry_source_files, trust_remote_code
from lmi_build.core.errors import StepError
from lmi_build.core.fs import atomic_write_json, link_or_copy, link_tree
from lmi_build.core.reading import BadFile, read_json_file, read_regular_text
from lmi_build.core.types import PlanMessage
from lmi_build.options.properties import read_properties
from lmi_build.planning.context import read_text, written_text
from lmi_build.planning.plan import BuildPlan
from lmi_build.targets.neuronx.batching import batching_problems, container_batching
from lmi_build.targets.neuronx.cache_tree import check_tree, module_dirs
from lmi_build.targets.neuronx.knobs import NeuronxBuild
from lmi_build.targets.neuronx.options import NeuronxOptions
from lmi_build.targets.neuronx.profiles import load_profiles

if TYPE_CHECKING:
    from lmi_build.targets.neuronx.profiles import NeuronProfile

COMPILED_DIR = "compiled"
CHECKPOINT_DIR = "checkpoint"
BUILD_LOGS = "build-logs"
NEFF_NAME = re.compile(r"[0-9a-f]{20}\.neff")
NEURON_BLOCK_KEYS = ("auto_cast_type", "batch_size", "checkpoint_id", "checkpoint_revision", "compiler_type",
                     "compiler_version", "num_cores", "sequence_length")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def _build(plan: BuildPlan) -> NeuronxBuild:
    return plan.knobs(NeuronxBuild)


def neuron_block(plan: BuildPlan, compiler_version: str) -> dict[str, Any]:
    """The ``neuron`` block DJL writes into config.json after partitioning (ML:273-289)."""
    build = _build(plan)
    return {"auto_cast_type": build.amp, "batch_size": build.batch_size, "checkpoint_id": None,
            "checkpoint_revision": None, "compiler_type": "neuronx-cc", "compiler_version": compiler_version,
            "num_cores": build.tp, "sequence_length": max(build.n_positions)}


def tnx_properties(build: NeuronxBuild, rolling: bool) -> dict[str, str]:
    """The serving.properties keys the NEFFs depend on (``TnxPrecompiledLayout.properties``)."""
    static = None if rolling else build.batch_size
    return written_text(NeuronxOptions(engine="Python", tensor_parallel_degree=build.tp, n_positions=max(build.n_positions),
                                       rolling_batch=None if rolling else "disable",
                                       max_rolling_batch_size=build.batch_size if rolling else None,
                                       option_batch_size=static, batch_size=static))


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object of the artifact or the model, read bounded (``lmi_build.core.reading``: a config.json
    nested 100,000 deep is None here, not a RecursionError); None when absent or not one."""
    try:
        loaded = read_json_file(path, what="JSON file")
    except (BadFile, OSError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _read_version(path: Path) -> str | None:
    """compiled/VERSION (the neuronx-cc version), bounded; None when absent or unreadable."""
    try:
        return read_regular_text(path, limit=4096, what="compiled/VERSION").strip() if path.is_file() else None
    except (BadFile, OSError, UnicodeDecodeError):
        return None


def _write_model_files(plan: BuildPlan, source_dir: Path, staging: Path, version_file: Path) -> None:
    """The artifact's top level DJL reads: the model's config.json with the ``neuron`` block for the
    compiler that wrote ``version_file``, and the tokenizer/source files."""
    config = _read_json(source_dir / "config.json")
    if config is None:
        raise StepError(f"{source_dir}/config.json is missing or unreadable", hint="fetch the model again")
    config["neuron"] = neuron_block(plan, version_file.read_text(encoding="utf-8").strip())
    atomic_write_json(staging / "config.json", config, indent=2)
    carry_source_files(source_dir, staging, trust_remote_code=trust_remote_code(plan))


class TnxPrecompiledLayout:
    name = "neuronx-tnx"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        version_file = produced / "VERSION"
        if not version_file.is_file() or not any(produced.glob("*.neff")):
            raise StepError(f"{produced} is not a compiled TNX directory (VERSION and *.neff expected)",
                            hint="compile first")
        compiled = staging / COMPILED_DIR
        compiled.mkdir()
        for entry in sorted(produced.iterdir()):
            if entry.is_file():
                link_or_copy(entry, compiled / entry.name)
        logs = produced / BUILD_LOGS
        if logs.is_dir():
            (staging / BUILD_LOGS).mkdir()
            for log in sorted(logs.iterdir()):
                if log.is_file():
                    link_or_copy(log, staging / BUILD_LOGS / log.name)
        _write_model_files(plan, source_dir, staging, version_file)

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        """The keys the NEFFs depend on. Batching (the plan writes the same, ``plan._batching``): under
        rolling batch only option.max_rolling_batch_size (DJL sets TNX's batch from it and refuses an
        option.batch_size > 1 beside it); static: rolling batch written off (unset is auto on 0.30+),
        the batch as option.batch_size (TNX) and as the top-level batch_size (DJL's request batching)."""
        return tnx_properties(_build(plan), (read_text(plan.options, NeuronxOptions).rolling_batch or "disable") != "disable")

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        return self.check_as(artifact_dir, self.name)

    @staticmethod
    def check_as(artifact_dir: Path, layout: str) -> list[PlanMessage]:
        """The checks of a compiled/ + neuron block tree, its batching read by the releases of ``layout``."""
        problems: list[PlanMessage] = []

        def problem(code: str, message: str, hint: str = "rebuild the artifact") -> None:
            problems.append(PlanMessage(code=code, message=message, hint=hint))

        compiled = artifact_dir / COMPILED_DIR
        if not compiled.is_dir():
            problem("neuron_compiled", "compiled/ is missing: the container crashes listing it")
            return problems
        neffs = sorted(p.name for p in compiled.glob("*.neff"))
        if not neffs:
            problem("neuron_neff", "compiled/ holds no *.neff: the container would fail to load, not compile")
        for name in neffs:
            if not NEFF_NAME.fullmatch(name):
                problem("neuron_neff_name", f"compiled/{name} is not named <sha256(hlo)[:20]>.neff: TNX cannot find it")
        version_file = compiled / "VERSION"
        version = _read_version(version_file)
        if version is None:
            problem("neuron_version", "compiled/VERSION (the neuronx-cc version) is missing")
        tnx_config = _read_json(compiled / "config.json")
        if tnx_config is None:
            problem("neuron_tnx_config", "compiled/config.json is missing or unreadable")
        elif any(compiled.glob("*.safetensors")) and tnx_config.get("is_presharded_checkpoint") is not True:
            problem("neuron_presharded", "compiled/ has safetensors but its config.json lacks "
                                         "is_presharded_checkpoint: true, so TNX would not load them as presharded")
        config = _read_json(artifact_dir / "config.json")
        block = config.get("neuron") if config else None
        if not isinstance(block, dict):
            problem("neuron_block", "config.json has no neuron block: the container would compile again")
        else:
            missing = [key for key in NEURON_BLOCK_KEYS if key not in block]
            if missing:
                problem("neuron_block", f"the neuron block of config.json lacks {', '.join(missing)}")
            if version is not None and block.get("compiler_version") != version:
                problem("neuron_block_version", f"neuron block compiler_version {block.get('compiler_version')}, "
                                                f"compiled/VERSION {version}")
            properties_file = artifact_dir / "serving.properties"
            if properties_file.is_file():
                problems += _block_vs_properties(block, read_properties(properties_file), layout)
        if not any((artifact_dir / name).is_file() for name in TOKENIZER_FILES):
            problem("tokenizer", f"no tokenizer (none of {', '.join(TOKENIZER_FILES)})",
                    "carry the tokenizer from the source model: rebuild with its tokenizer files present")
        return problems


SPLIT_INDEX = Path("pytorch_model.bin") / "key_to_filename.json"  # transformers_neuronx module.py:31-50


class LegacyCheckpointLayout:
    name = "neuronx-legacy"
    split = False  # checkpoint/ holds safetensors (0.28/0.29), or TNX's split format (0.27)

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        compiled_in, checkpoint_in = produced / COMPILED_DIR, produced / CHECKPOINT_DIR
        version_file = compiled_in / "VERSION"
        if not version_file.is_file() or not any(compiled_in.glob("*.neff")):
            raise StepError(f"{compiled_in} is not a compiled TNX directory (VERSION and *.neff expected)",
                            hint="compile first")
        problem = self._checkpoint_problem(checkpoint_in)
        if problem:
            raise StepError(f"{checkpoint_in}: {problem}", hint="compile first")
        for source, target in ((compiled_in, staging / COMPILED_DIR), (checkpoint_in, staging / CHECKPOINT_DIR),
                               (produced / BUILD_LOGS, staging / BUILD_LOGS)):
            if source.is_dir():
                link_tree(source, target)
        _write_model_files(plan, source_dir, staging, version_file)

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return TnxPrecompiledLayout().properties(plan)

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        problems = [p for p in TnxPrecompiledLayout.check_as(artifact_dir, self.name)
                    if p.code not in ("neuron_tnx_config", "neuron_presharded")]
        problem = self._checkpoint_problem(artifact_dir / CHECKPOINT_DIR)
        if problem:
            problems.append(PlanMessage(code="neuron_checkpoint", message=f"checkpoint/: {problem}",
                                        hint="rebuild the artifact"))
        if any(artifact_dir.glob("*.safetensors")):
            problems.append(PlanMessage(code="neuron_top_level_weights",
                                        message="*.safetensors at the top level: DJL would compile the directory "
                                                "as a plain model instead of loading compiled/",
                                        hint="keep the weights in checkpoint/ only"))
        return problems

    def _checkpoint_problem(self, checkpoint: Path) -> str | None:
        if not (checkpoint / "config.json").is_file():
            return "config.json is missing"
        if self.split:
            if not (checkpoint / SPLIT_INDEX).is_file():
                return f"no {SPLIT_INDEX} (transformers-neuronx's split format, which LMI 0.27 loads)"
        elif not any(checkpoint.glob("*.safetensors")):
            return "no *.safetensors: DJL 0.28/0.29 would read it as a split checkpoint"
        return None


class SplitCheckpointLayout(LegacyCheckpointLayout):
    name = "neuronx-split"
    split = True


OPTIMUM_BLOCK_KEYS = ("task", "batch_size", "num_cores", "auto_cast_type", "sequence_length", "compiler_type",
                      "compiler_version", "checkpoint_id", "checkpoint_revision")


class OptimumExportLayout:
    name = "neuronx-optimum"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        config = _read_json(produced / "config.json")
        if config is None or not isinstance(config.get("neuron"), dict):
            raise StepError(f"{produced} has no config.json with a neuron block", hint="export first")
        for name in (COMPILED_DIR, CHECKPOINT_DIR, BUILD_LOGS):
            source = produced / name
            if source.is_dir():
                (staging / name).mkdir()
                for entry in sorted(source.iterdir()):
                    if entry.is_file():
                        link_or_copy(entry, staging / name / entry.name)
        for entry in sorted(produced.iterdir()):
            if entry.is_file():  # config.json, generation_config.json (and a stand-in's marker)
                link_or_copy(entry, staging / entry.name)
        carry_source_files(source_dir, staging, trust_remote_code=trust_remote_code(plan))

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        return TnxPrecompiledLayout().properties(plan)

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        problems: list[PlanMessage] = []

        def problem(code: str, message: str) -> None:
            problems.append(PlanMessage(code=code, message=message, hint="rebuild the artifact"))

        config = _read_json(artifact_dir / "config.json")
        block = config.get("neuron") if config else None
        if not isinstance(block, dict):
            problem("neuron_block", "config.json has no neuron block: DJL's optimum loader would export again")
            return problems
        missing = [key for key in OPTIMUM_BLOCK_KEYS if key not in block]
        if missing:
            problem("neuron_block", f"the neuron block of config.json lacks {', '.join(missing)}")
        if not any((artifact_dir / COMPILED_DIR).glob("*.neff")):
            problem("neuron_neff", "compiled/ holds no *.neff: optimum-neuron asserts compiled/ exists")
        if block.get("checkpoint_id") is None and not (artifact_dir / CHECKPOINT_DIR).is_dir():
            problem("neuron_checkpoint", "checkpoint/ is missing and the neuron block names no checkpoint_id: "
                                         "optimum-neuron cannot find the weights")
        properties_file = artifact_dir / "serving.properties"
        if properties_file.is_file():
            problems += _block_vs_properties(block, read_properties(properties_file), self.name)
        if not any((artifact_dir / name).is_file() for name in TOKENIZER_FILES):
            problem("tokenizer", f"no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
        return problems


def _block_vs_properties(block: dict[str, Any], properties: dict[str, str], layout: str) -> list[PlanMessage]:
    """DJL compares these before skipping the compile (ML:518-520, 623-649): each must agree. The batch
    is serving.properties' batching keys as every release that loads ``layout`` reads them
    (``batching``: an unset option.rolling_batch is auto, rolling batch, on 0.30+)."""
    text = read_text(properties, NeuronxOptions)
    pairs = (("num_cores", text.tensor_parallel_degree, "option.tensor_parallel_degree"),
             ("sequence_length", text.n_positions, "option.n_positions"))
    problems: list[PlanMessage] = []
    for key, served, where in pairs:
        if served is None:
            problems.append(PlanMessage(code="neuron_properties", message=f"serving.properties has no {where}; the "
                                        f"neuron block says {key}={block.get(key)}",
                                        hint=f"set {where.split(' ')[0]}={block.get(key)}"))
        elif str(block.get(key)) != served:
            problems.append(PlanMessage(code="neuron_properties", message=f"neuron block {key}={block.get(key)}, "
                                        f"serving.properties {where}={served}",
                                        hint="serve with the values the NEFFs were compiled for, or rebuild"))
    built = block.get("batch_size")
    if isinstance(built, int):
        problems += [PlanMessage(code="neuron_batching", message=message,
                                 hint="serve with the batching the NEFFs were compiled for (option.rolling_batch "
                                      "written out), or rebuild")
                     for message in batching_problems(properties, built, _releases_claimed(layout, properties))]
    else:
        problems.append(PlanMessage(code="neuron_block", message=f"the neuron block's batch_size is {built!r}",
                                    hint="rebuild the artifact"))
    return problems


def _releases_claimed(layout: str, properties: Mapping[str, str]) -> list[NeuronProfile]:
    """The releases the artifact is for: those whose own precompiled layout this is (every release for
    the optimum export: any release's optimum loader reads it), less those whose DJL refuses its
    serving.properties outright at start-up (0.28-0.32 turn on MPI mode for option.rolling_batch=lmi-dist,
    which 0.27 does not for engine=Python): a loud refusal that ``verify --for-container`` names, not
    NEFFs served otherwise than built. Every one of them when each refuses: such an artifact is no one's."""
    profiles = load_profiles()
    loading = [p for p in profiles if p.layout == layout] or profiles
    return [p for p in loading if container_batching(properties, p).refusal is None] or loading


class CacheTreeLayout:
    """``neuronx-cache``: the compile-cache tree itself, for ``option.compiled_graph_path=s3://...``
    (facts §5: an s3:// value only acts as NEURON_COMPILE_CACHE_URL; the local-directory form is
    loaded with model.load and needs flat NEFFs instead). The container compiles nothing when the
    HLO and flags match, so serving.properties names the original weights (option.model_id) and
    carries the planned knobs; publish the artifact to the compiled_graph_path URL::

        neuronxcc-<version>[+<hash>]/MODULE_<hlo hash>+<flags hash>/{model.neff, model.done, ...}
        serving.properties
    """

    name = "neuronx-cache"

    def assemble(self, plan: BuildPlan, produced: Path, source_dir: Path, staging: Path) -> None:
        problems = check_tree(produced)
        if problems:
            name, why = problems[0]
            raise StepError(f"compile-cache entry {name} is {why}", hint="compile again; never ship such entries")
        for module in module_dirs(produced):
            target = staging / module.relative_to(produced)
            target.mkdir(parents=True)
            for file in sorted(module.iterdir()):
                if file.is_file():
                    link_or_copy(file, target / file.name)

    def properties(self, plan: BuildPlan) -> dict[str, str]:
        # The container fetches the original weights.
        return {**TnxPrecompiledLayout().properties(plan),
                **written_text(NeuronxOptions(model_id=plan.model.id, revision=plan.model.revision or None))}

    def check(self, artifact_dir: Path) -> list[PlanMessage]:
        problems = [PlanMessage(code="neuron_cache_entry", message=f"compile-cache entry {entry}: {why}",
                                hint="rebuild the artifact") for entry, why in check_tree(artifact_dir)]
        properties_file = artifact_dir / "serving.properties"
        properties = read_properties(properties_file) if properties_file.is_file() else {}
        text = read_text(properties, NeuronxOptions)
        graph = text.compiled_graph_path or ""
        if not graph.startswith("s3://"):
            problems.append(PlanMessage(code="neuron_graph_path",
                                        message=f"option.compiled_graph_path is '{graph}', not an s3:// URL",
                                        hint="a cache tree is read only through an s3:// compiled_graph_path"))
        if not text.model_id:
            problems.append(PlanMessage(code="neuron_model_id", message="serving.properties has no option.model_id",
                                        hint="the cache tree is served next to the original weights: name them"))
        return problems


# The layouts this target packages, by name (``Target.layouts()``).
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    TnxPrecompiledLayout(), CacheTreeLayout(), LegacyCheckpointLayout(), OptimumExportLayout(), SplitCheckpointLayout())}
