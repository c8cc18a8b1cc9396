"""The build cache key: a SHA-256 over everything that decides the artifact's bytes, and nothing
else. Same inputs -> same key on any host; any build-relevant change -> a new key; runtime-only
options (job_queue_size, ...) and where a value came from (CLI, properties, env) do not matter."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from lmi_build.planning.plan import BuildPlan, QuantizationPlan, TargetKnobs, ToolchainRef
from lmi_build.types import ModelIdentity

KEY_VERSION = 1
# Keys that never change what is built, whatever the option table says: the model's identity is
# hashed separately (id/revision/digest), and these only tell the container where things are.
IGNORED_KEYS = frozenset({
    "option.model_id", "option.revision", "option.save_mp_checkpoint_path", "option.entryPoint",
    "option.compiled_graph_path", "option.load_split_model", "engine", "model_dir",
    "upload_checkpoints_s3url", "properties_dir", "job_queue_size",
})


def build_relevant_options(options: Mapping[str, str], target: str) -> dict[str, str]:
    """The options that change the artifact: those the option table marks build_relevant; options
    it does not know are kept (an unknown key might matter, and a spurious rebuild is cheap)."""
    from lmi_build.options.resolve import option_spec

    kept: dict[str, str] = {}
    for key, value in options.items():
        if key in IGNORED_KEYS:
            continue
        spec = option_spec(key)
        if spec is None or spec.is_build_relevant(target):
            kept[key] = value
    return kept


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
        "options": build_relevant_options(options, target),
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
