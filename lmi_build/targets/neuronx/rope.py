"""RoPE scaling as each LMI Neuron release loads it (issue 21 finding 8): the image's transformers
must parse the config's ``rope_scaling`` (DJL reads every model's config with AutoConfig), and
transformers-neuronx must apply it, or the model loads with unscaled RoPE and answers wrongly past
its original context. The rules per release are the profile's data (``llama_rope_scaling_parsed``,
``tnx_rope_scaling``, ``tnx_rope_scaling_other``, cited in ``rope_scaling_sources``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lmi_build.core.types import PlanMessage
from lmi_build.model.spec import ModelSpec
from lmi_build.targets.neuronx.profiles import NeuronProfile, load_profiles

LLAMA = "llama"  # the one model type whose config transformers-neuronx reads rope_scaling from


@dataclass(frozen=True)
class RopeOutcome:
    outcome: Literal["rejected", "unscaled", "unchecked"]
    message: str
    sources: tuple[str, ...]


def transformers_parses(rope_scaling: Any, parsed: tuple[str, ...]) -> str | None:
    """transformers 4.35/4.36 LlamaConfig._rope_scaling_validation: None when it accepts
    ``rope_scaling``, else its ValueError's gist."""
    if rope_scaling is None:
        return None
    if not isinstance(rope_scaling, dict) or len(rope_scaling) != 2:
        return f"`rope_scaling` must be a dictionary with with two fields, `type` and `factor`, got {rope_scaling}"
    kind = rope_scaling.get("type")
    if kind not in parsed:
        return f"`rope_scaling`'s type field must be one of {list(parsed)}, got {kind}"
    factor = rope_scaling.get("factor")
    if not isinstance(factor, float) or factor <= 1.0:
        return f"`rope_scaling`'s factor field must be a float > 1, got {factor}"
    return None


def rope_scaling_of(spec: ModelSpec) -> Any:
    """config.json's ``rope_scaling`` as written: from the raw config where the spec has it (plan),
    else the spec's record of it (a manifest's spec drops the raw config; it keeps ``rope.raw_scaling``,
    which is the config's dict whenever it names a scaling type)."""
    if "rope_scaling" in spec.raw:
        return spec.raw["rope_scaling"]
    return spec.rope.raw_scaling if spec.rope is not None else None


def rope_message(profile: NeuronProfile, spec: ModelSpec) -> tuple[Literal["error", "warning"], PlanMessage] | None:
    """``rope_outcome`` as the one message plan and ``verify --for-container`` both report: an error
    where the release rejects the config or would load it with unscaled RoPE, a warning where unchecked.
    The hint names the first release that loads the model's scaling as trained (issue 42 item 8)."""
    found = rope_outcome(profile, spec)
    if found is None:
        return None
    # One line that names where its sources are kept (the profile's rope_scaling_sources), not a
    # kilobyte of commit hashes (issue 30 item 6; the finding itself carries them: ``RopeOutcome.sources``).
    cited = f"(sources: lmi-build profiles show {profile.name}, rope_scaling_sources)"
    scaling = spec.rope.scaling_type if spec.rope is not None else None
    first = first_scaling_release(spec)
    pick = (f"pick {first.name} or newer, the first release whose transformers-neuronx applies {scaling} RoPE "
            "scaling" if first is not None else f"no LMI Neuron release applies {spec.model_type}'s {scaling} RoPE "
            "scaling: serve the model on a GPU target (trtllm, hf)")
    if found.outcome == "unchecked":
        return "warning", PlanMessage(code="neuron_rope_scaling_unchecked", message=f"{found.message} {cited}",
                                      hint=f"check the outputs at long context, or {pick}")
    return "error", PlanMessage(code="neuron_rope_scaling", message=f"{found.message} {cited}", hint=pick)


def first_scaling_release(spec: ModelSpec) -> NeuronProfile | None:
    """The oldest release (checked, published or not) that loads ``spec``'s RoPE scaling as trained."""
    return next((release for release in load_profiles()
                 if release.rope_scaling_checked and rope_outcome(release, spec) is None), None)


def rope_outcome(profile: NeuronProfile, spec: ModelSpec) -> RopeOutcome | None:
    """What ``profile``'s release makes of the model's RoPE scaling; None when it loads it as trained."""
    sources = profile.rope_scaling_sources
    raw = rope_scaling_of(spec)
    if spec.model_type == LLAMA and profile.llama_rope_scaling_parsed is not None:
        refused = transformers_parses(raw, profile.llama_rope_scaling_parsed)
        if refused is not None:
            return RopeOutcome("rejected", f"{profile.name}'s transformers cannot read this config: {refused}",
                               sources)
    kind = spec.rope.scaling_type if spec.rope is not None else None
    if kind is None:
        return None
    if not profile.rope_scaling_checked:
        return RopeOutcome("unchecked", f"whether {profile.name}'s transformers-neuronx "
                           f"{profile.transformers_neuronx} applies {kind} RoPE scaling is unchecked (no public "
                           "source of that version)", sources)
    if spec.model_type == LLAMA and kind in profile.tnx_rope_scaling:
        return None
    if spec.model_type == LLAMA and profile.tnx_rope_scaling_other == "refused":
        return RopeOutcome("rejected", f"{profile.name}'s transformers-neuronx {profile.transformers_neuronx} refuses "
                           f"{kind} RoPE scaling: ValueError \"Only default and llama3 ropes scaling types are "
                           "currently supported\"", sources)
    return RopeOutcome("unscaled", f"{profile.name}'s transformers-neuronx {profile.transformers_neuronx} ignores "
                       f"{spec.model_type}'s {kind} RoPE scaling: the model would load with unscaled RoPE and give "
                       "wrong outputs", sources)
