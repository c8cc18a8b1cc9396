"""The build cache key: a SHA-256 over everything that decides the artifact's bytes, and nothing
else. Same inputs -> same key on any host; any change to what lands in the artifact (a build knob
or a serving option) -> a new key; where a value came from (CLI, properties, env) does not matter."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from lmi_build.core.types import ModelIdentity
from lmi_build.planning.plan import BuildPlan, QuantizationPlan, TargetKnobs, ToolchainRef

# 2: every option written into the artifact is hashed (1 left runtime-only options out, so an
# artifact's serving.properties could come from another build's options).
KEY_VERSION = 2
# The model's identity is hashed separately (id, revision, content digest); these two keys only name it.
IDENTITY_KEYS = frozenset({"option.model_id", "option.revision"})


def artifact_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options that reach the artifact (its serving.properties among them): all of them but
    the model's name. A runtime-only option changes only serving.properties, yet an artifact
    reused under another option set would serve the other set's values, so it is part of the key.
    (The quantized-checkpoint cache has its own narrower key: a runtime option never re-quantizes.)"""
    return {key: value for key, value in options.items() if key not in IDENTITY_KEYS}


def compute_cache_key(
    *,
    model: ModelIdentity,
    config_digest: str,
    recipe: str,
    recipe_version: int,
    target: str,
    options: Mapping[str, str],
    build: TargetKnobs | None,
    quantization: QuantizationPlan,
    toolchain: ToolchainRef,
) -> str:
    material: dict[str, Any] = {
        "key_version": KEY_VERSION,
        "model": model.model_dump(mode="json"),
        # The config the plan was made from: a local directory's identity is only its name.
        "config": config_digest,
        "recipe": {"name": recipe, "version": recipe_version},
        "target": target,
        "options": artifact_options(options),
        "build": build.model_dump(mode="json") if build is not None else None,
        "quantization": quantization.model_dump(mode="json"),
        "toolchain": toolchain.model_dump(mode="json"),
    }
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def config_digest(config: Mapping[str, Any]) -> str:
    """A digest of a parsed config.json that ignores key order and whitespace."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_cache_key(plan: BuildPlan) -> str:
    """The cache key of a plan's own content: what the planner computed it from (a saved plan whose
    key is not this one was edited)."""
    return compute_cache_key(
        model=plan.model, config_digest=config_digest(plan.spec.raw), recipe=plan.recipe,
        recipe_version=plan.recipe_version, target=plan.target, options=plan.options, build=plan.build,
        quantization=plan.quantization, toolchain=plan.toolchain,
    )
