"""LMI Neuron container profiles: one ``data/profiles/<name>.toml`` per DJL Serving Neuron release.

A profile fixes everything that makes a NEFF reusable by that container: the neuronx-cc version
(and the commit suffix of its cache directory), the transformers-neuronx that builds the HLO, the
container's ``NEURON_CC_FLAGS``, the loader DJL picks by default and the layout it loads. Read
without heavy imports (``plan``, ``profiles list``) by ``lmi_build.core.container_profiles``.

Versions: docs/VENDOR-FACTS.md §5 "Toolchain and container versions", read from deepjavalibrary/djl-serving
serving/docker/pytorch-inf2.Dockerfile on the <version>-dlc branches. A field named in ``inferred`` was
not checked against a source; its value is the nearest checked one.
"""

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from lmi_build.core import container_profiles
from lmi_build.core.container_profiles import ContainerRelease
from lmi_build.core.errors import UnknownName, UnsupportedTarget
from lmi_build.core.tables import load_table
from lmi_build.core.types import Record
from lmi_build.core.versions import parse_lmi_version

PROFILES_DIR = Path(__file__).resolve().parent / "data" / "profiles"
NEURON_END_FILE = Path(__file__).resolve().parent / "data" / "neuron_end.toml"
NEURON_NAME = re.compile(r"lmi-(\d+\.\d+\.\d+)-neuronx\b.*")
Loader = Literal["tnx", "optimum", "nxdi", "vllm"]


class NeuronProfile(ContainerRelease):
    # name: "lmi-0.30.0-neuronx-sdk2.20.1"
    image: str  # empty when no image was published (source-only releases)
    released: bool = True
    neuron_sdk: str
    neuronx_cc: str
    # The "+<hash>" of neuronxcc-<version>+<hash>/ compile-cache directories; empty where no cache
    # tree of that compiler was seen.
    neuronx_cc_commit: str = ""
    transformers_neuronx: str
    optimum_neuron: str
    neuronx_distributed_inference: str | None = None
    vllm_neuronx: str | None = None
    transformers: str | None = None
    python: str
    neuron_cc_flags: str  # the image's ENV NEURON_CC_FLAGS
    # The loader DJL uses when option.model_loader is not set, and when it switches to TNX anyway:
    # "rolling_batch" (0.26: rolling batch on, a model type outside optimum's, load_split_model or
    # load_in_8bit), "model_type_or_option" (0.27: model types outside optimum's, llama/mistral
    # without rolling batch, or a TNX-only option set), "none" (0.28+: TNX unless model_loader says).
    default_loader: Literal["tnx", "optimum"]
    tnx_switch: Literal["rolling_batch", "model_type_or_option", "none"]
    model_loaders: tuple[Loader, ...] = ()  # the option.model_loader values this release accepts
    # The precompiled TNX layout this release loads: "neuronx-split" (0.26/0.27: checkpoint/ in TNX's
    # split format + compiled/), "neuronx-legacy" (0.28/0.29: checkpoint/ safetensors + compiled/),
    # "neuronx-tnx" (0.30+: compiled/ with presharded weights and NEFFs).
    layout: Literal["neuronx-split", "neuronx-legacy", "neuronx-tnx"]
    # 0.30+ turns on_device_embedding on whenever it partitions or loads a `neuron` config
    # (neuron_smart_default_utils.py:83-85); 0.28/0.29 pass it to TNX only from an
    # on_device_embedding_config file (model_loader.py:194-197), so their NeuronConfig lacks it.
    precompiled_on_device_embedding: bool = False
    # Whether the release reads option.on_device_embedding at all (0.27: TP:101, ML:132-134; 0.30+:
    # TP:119, ML:214-216; 0.26/0.28/0.29 have no such field), and 0.30+'s load_split_model=true turning
    # it on (TP set_on_device_embedding). Citations: ``on_device_embedding_sources``.
    on_device_embedding_option: bool = False
    on_device_embedding_sources: tuple[str, ...] = ()
    # When DJL compiles for TNX continuous batching: "rolling" (0.26: whenever rolling batch is on),
    # "rolling_model_type" (0.27: and llama/mistral), "rolling_model_type_batch" (0.28+: and
    # max_rolling_batch_size > 1).
    continuous_batching_rule: Literal["rolling", "rolling_model_type", "rolling_model_type_batch"] = (
        "rolling_model_type_batch")
    # 0.28/0.29: option.rolling_batch=vllm compiles for continuous batching whatever the model type
    # and batch (``vllm_continuous_batching_sources``).
    vllm_continuous_batching: bool = False
    vllm_continuous_batching_sources: tuple[str, ...] = ()
    # Its context buckets when option.context_length_estimate is unset: "n_positions" (0.26-0.29:
    # [n_positions]) or "buckets" (0.30+: 128, 1024, 2048, ... n_positions; [n_positions] with
    # option.cache_layout=BSH). When DJL raises on a given list (RuntimeError "need to be the same as
    # n_positions"): "always" unless it is exactly [n_positions] (0.26-0.28), "cache_layout_bsh" the
    # same only with option.cache_layout=BSH (0.29), "cache_layout_bsh_first" when its first entry
    # is not n_positions, only with BSH (0.30+). Citations: ``continuous_batching_contexts_sources``.
    continuous_batching_contexts: Literal["n_positions", "buckets"] = "buckets"
    continuous_batching_contexts_must_equal_n: Literal[
        "always", "cache_layout_bsh", "cache_layout_bsh_first"] = "cache_layout_bsh_first"
    continuous_batching_contexts_sources: tuple[str, ...] = ()
    # What the release's Java side makes of option.rolling_batch and the top-level batch_size
    # (lmi_build.targets.neuronx.batching; citations in ``rolling_batch_sources``):
    #   "none" (0.26): nothing; unset is the Python default, disable.
    #   "without_engine" (0.27): the recommender runs only when ``engine`` is unset (batch_size > 1
    #     -> disable, unset -> auto); with engine set (as lmi-build writes it) as "none".
    #   "tnx_disable" (0.28/0.29): batch_size > 1 -> disable; unset -> disable; auto -> tnx.
    #   "auto" (0.30+): batch_size > 1 -> disable; unset -> auto; auto -> vllm from
    #     ``auto_rolling_batch_vllm_from`` (the written option.max_rolling_batch_size, default 1), else tnx.
    rolling_batch_recommender: Literal["none", "without_engine", "tnx_disable", "auto"]
    auto_rolling_batch_vllm_from: int | None = None
    rolling_batch_sources: tuple[str, ...] = ()
    # Rolling batch values for which the recommender turns on option.mpi_mode (setMpiMode), whose
    # MPI path counts GPUs and finds none on a Neuron host ("GPU devices are not enough"): cited in
    # ``mpi_sources``. ``rolling_batch_renamed``: values the recommender rewrites (0.33+: lmi-dist -> vllm).
    mpi_rolling_batch: tuple[str, ...] = ()
    mpi_sources: tuple[str, ...] = ()
    rolling_batch_renamed: dict[str, str] = Field(default_factory=dict)
    # What option.compiled_graph_path=s3://... does: "cache" (only NEURON_COMPILE_CACHE_URL: the
    # compile-cache tree is read) or "rejected" (0.27 also model.load()s the s3 URL, which
    # transformers-neuronx refuses as a missing directory). Citations: ``compiled_graph_path_sources``.
    compiled_graph_path_s3: Literal["cache", "rejected"] = "cache"
    compiled_graph_path_sources: tuple[str, ...] = ()
    # RoPE scaling as the release loads it (``lmi_build.targets.neuronx.rope``; ``rope_scaling_sources``):
    # the rope_scaling types the image's transformers LlamaConfig parses (None: every type; 4.35/4.36
    # parse exactly {type, factor} with linear/dynamic), the types transformers-neuronx applies for
    # llama, and what it does with another type: "ignored" (loads with unscaled RoPE: wrong outputs)
    # or "refused" (ValueError). ``rope_scaling_checked`` false: the release's TNX has no public source.
    llama_rope_scaling_parsed: tuple[str, ...] | None = None
    tnx_rope_scaling: tuple[str, ...] = ()
    tnx_rope_scaling_other: Literal["ignored", "refused"] = "ignored"
    rope_scaling_checked: bool = True
    rope_scaling_sources: tuple[str, ...] = ()
    # option.n_positions when serving.properties has none, as the release resolves it: an int (0.26-0.29:
    # TnXProperties' field default, 128) or None, the smart default min(max_position_embeddings,
    # ``[defaults] max_n_positions``) (0.30+: Java's NeuronSmartDefaultUtils, then the Python one). The plan
    # writes it when the user gives none. Citations: ``n_positions_default_sources``.
    n_positions_default: int | None = None
    n_positions_default_sources: tuple[str, ...] = ()
    # The partition lmi-build's driver reproduces for this release's split layout, or why none:
    # 0.27's legacy_partition is built; 0.26's differs (below) and is refused with this reason.
    split_layout_unbuilt: str = ""
    # The optimum-neuron class DJL exports with; lmi-build's driver can only call optimum's own.
    optimum_class: str = "optimum.neuron.NeuronModelForCausalLM"
    inferred: tuple[str, ...] = ()  # fields not checked against a source
    sources: tuple[str, ...] = ()
    notes: str = ""

    @property
    def cache_dir_name(self) -> str:
        """The compile cache's top directory for this compiler (``neuronxcc-<version>+<hash>``)."""
        suffix = f"+{self.neuronx_cc_commit}" if self.neuronx_cc_commit else ""
        return f"neuronxcc-{self.neuronx_cc}{suffix}"

    def versions(self) -> dict[str, str]:
        found = {"neuronx_cc": self.neuronx_cc, "neuron_sdk": self.neuron_sdk,
                 "transformers_neuronx": self.transformers_neuronx, "optimum_neuron": self.optimum_neuron,
                 "python": self.python, "lmi": self.lmi_version}
        for key, value in (("neuronx_distributed_inference", self.neuronx_distributed_inference),
                           ("vllm_neuronx", self.vllm_neuronx), ("transformers", self.transformers)):
            if value:
                found[key] = value
        return found


class NeuronEnd(Record):
    """The last LMI release with Neuron, and why there is none after it (``data/neuron_end.toml``)."""

    last_release: str
    removed_in: str
    removed_by: str
    upstream: str


def neuron_end() -> NeuronEnd:
    return load_table(NEURON_END_FILE, NeuronEnd)


def refuse_after_neuron_end(lmi_version: str) -> None:
    """A Neuron build for an LMI release after Neuron was removed: one line naming what to use instead."""
    end = neuron_end()
    if parse_lmi_version(lmi_version) < parse_lmi_version(end.removed_in):
        return
    profiles = load_profiles()
    last = [p.name for p in profiles if p.lmi_version == end.last_release]
    published = [p.name for p in profiles if p.published]
    raise UnsupportedTarget(
        f"LMI {lmi_version} has no Neuron container: DJL Serving removed Neuron in {end.removed_in} "
        f"(djl-serving 1132e3ab), and transformers-neuronx support ended upstream on 2025-09-16",
        hint=f"use the last release with Neuron, LMI {end.last_release} (--profile {', '.join(last) or 'none'}; "
             f"the newest published image: {published[-1] if published else 'none'}), or NxD Inference outside LMI")


def load_profiles() -> list[NeuronProfile]:
    """Every Neuron profile, oldest release first."""
    return container_profiles.load_profiles("neuronx", PROFILES_DIR, NeuronProfile)


def get_profile(name: str | None) -> NeuronProfile:
    """The named profile; ``None`` -> the newest published one (a DLC)."""
    profiles = load_profiles()
    if name is None:
        return [p for p in profiles if p.released and p.published][-1]
    for profile in profiles:
        if profile.name == name:
            return profile
    asked = NEURON_NAME.fullmatch(name)
    if asked:
        refuse_after_neuron_end(asked.group(1))
    raise UnknownName(f"unknown Neuron container profile '{name}'",
                      hint=f"known Neuron profiles: {', '.join(p.name for p in profiles)} (lmi-build profiles list)")
