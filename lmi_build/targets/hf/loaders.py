"""Which config.json architectures each hf container profile's engine loads (``data/loader_architectures.toml``:
the model registry of the profile's vLLM, and what an engine such as LMI-Dist adds to it, or the models of an
engine not built on vLLM (LMI-Dist 8, ``[[own_loader]]``), every list cited).
``plan --profile`` and ``verify --for-container`` use it; read without heavy imports."""

from collections.abc import Sequence
from pathlib import Path

from lmi_build.core.tables import load_table
from lmi_build.core.types import PlanMessage, Record
from lmi_build.targets.hf.profiles import HfProfile, load_profiles

LOADERS_FILE = Path(__file__).resolve().parent / "data" / "loader_architectures.toml"


class Loader(Record):
    vllm: str
    commit: str
    # an architecture outside the registry is tried with vLLM's Transformers backend (model_impl auto)
    transformers_fallback: bool
    sources: tuple[str, ...]
    architectures: tuple[str, ...]  # the text-generation table
    multimodal: tuple[str, ...] = ()  # the multimodal table (0.5.x keeps these in the table above)
    # the rope_scaling types its get_rope builds (any other raises at start-up); None: not read for this vLLM
    rope_scaling_types: tuple[str, ...] | None = None
    rope_reader: str = "its get_rope builds"  # who reads rope_scaling at start-up, for the refusal's message


class EngineArchitectures(Record):
    profile: str
    architectures: tuple[str, ...]
    sources: tuple[str, ...]
    inferred: tuple[str, ...] = ()


class OwnLoader(Record):
    """An engine with models of its own, not its image's vLLM's registry (LMI-Dist 8: ``lmi_dist.models.get_model``)."""

    profile: str
    commit: str  # the DJL branch's commit its lists are read at
    architectures: tuple[str, ...]
    rope_scaling_types: tuple[str, ...]  # the types its config reader takes (any other raises at start-up)
    rope_reader: str
    sources: tuple[str, ...]
    inferred: tuple[str, ...] = ()


class LoaderTable(Record):
    loader: tuple[Loader, ...]
    engine: tuple[EngineArchitectures, ...] = ()
    own_loader: tuple[OwnLoader, ...] = ()


def loader_table() -> LoaderTable:
    return load_table(LOADERS_FILE, LoaderTable)


def loader_of(profile: HfProfile) -> Loader:
    table = loader_table()
    own = next((o for o in table.own_loader if o.profile == profile.name), None)
    if own is not None:  # not its vLLM's registry: the engine's own models, no Transformers fallback
        return Loader(vllm=profile.vllm, commit=own.commit, transformers_fallback=False, sources=own.sources,
                      architectures=own.architectures, rope_scaling_types=own.rope_scaling_types,
                      rope_reader=own.rope_reader)
    for loader in table.loader:
        if loader.vllm == profile.vllm:
            return loader
    raise LookupError(f"no [[loader]] for vLLM {profile.vllm} ({profile.name}) in {LOADERS_FILE.name}")


def loaded_architectures(profile: HfProfile) -> frozenset[str]:
    """The architectures ``profile``'s engine resolves on its own (no Transformers-backend fallback)."""
    loader = loader_of(profile)
    extra = [a for e in loader_table().engine if e.profile == profile.name for a in e.architectures]
    return frozenset((*loader.architectures, *loader.multimodal, *extra))


def first_profile_loading(architectures: Sequence[str]) -> HfProfile | None:
    """The oldest hf profile whose engine loads one of ``architectures``."""
    return next((p for p in load_profiles() if loaded_architectures(p) & set(architectures)), None)


def architecture_problems(profile: HfProfile, architectures: Sequence[str]) -> tuple[list[PlanMessage], list[PlanMessage]]:
    """(errors, warnings) for a checkpoint whose config.json lists ``architectures``, served by
    ``profile``: the engine takes the first of them its registry resolves; none -> the vLLM releases
    without a Transformers-backend fallback refuse it (an error), those with one try it (a warning:
    whether transformers' class supports vLLM's attention backend is not known at plan time)."""
    if not architectures or loaded_architectures(profile) & set(architectures):
        return [], []
    names = "/".join(architectures)
    where = f"{profile.name} ({profile.engine}, {profile.runs_on})"
    first = first_profile_loading(architectures)
    has_it = (f"first hf profile that loads it: {first.name} (vLLM {first.vllm})" if first is not None
              else "no hf profile lmi-build knows loads it")
    hint = (f"use --profile {first.name}" if first is not None
            else "build for another target whose recipe serves it (lmi-build recipes list)")
    if loader_of(profile).transformers_fallback:
        return [], [PlanMessage(code="hf_architecture_fallback", hint=hint, message=(
            f"{names} is not in the model registry of {where}, which tries vLLM's Transformers backend "
            f"(it loads only if transformers' class supports vLLM's attention backend: not checked); {has_it}"))]
    return [PlanMessage(code="hf_architecture", hint=hint,
                        message=f"{where} has no loader for {names}; {has_it}")], []


def rope_problems(profile: HfProfile, scaling_type: str | None) -> list[PlanMessage]:
    """A config.json rope_scaling type ``profile``'s vLLM builds no rotary embedding for (its get_rope
    raises at start-up), naming the first hf profile whose vLLM has one."""
    loader = loader_of(profile)
    known = loader.rope_scaling_types
    if scaling_type is None or known is None or scaling_type in known:
        return []
    first = next((p for p in load_profiles() if scaling_type in (loader_of(p).rope_scaling_types or ())), None)
    where = f"{profile.name} ({profile.engine}, {profile.runs_on})"
    return [PlanMessage(code="hf_rope_scaling", hint=f"use --profile {first.name}" if first else
                        "build for another target whose recipe serves it (lmi-build recipes list)",
                        message=f"{where} has no rotary embedding for config.json rope_scaling type {scaling_type[:40]!r} "
                                f"({loader.rope_reader} {', '.join(known)}; any other raises at start-up); "
                                + (f"first hf profile that has it: {first.name} (vLLM {first.vllm})" if first
                                   else "no hf profile lmi-build knows has it"))]

