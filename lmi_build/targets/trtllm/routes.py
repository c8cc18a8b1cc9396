"""What a TensorRT-LLM container profile offers a recipe before any model is read (``lmi-build recipes
list --profile``): the checkpoint route it builds by, or the cited reason it does not.

The same facts the planner refuses by, in the same words where they are the same check: the family's
first release (``data/since.toml``, ``since.refusal``), the legacy (0.7) workflow's one example, the
encoder-decoder examples, converters whose flags were not read, and a version option the release's
converter has no flag for (``data/flags.toml``). What depends on the model (RoPE type, heads, lengths,
quantization) is left to the plan; tests/targets/trtllm/test_trtllm_recipe_routes.py checks that every
fixture config's plan agrees with this answer.
"""

from __future__ import annotations

from lmi_build.planning.target_api import RecipeRoute
from lmi_build.recipes.schema import Recipe, TargetSupport
from lmi_build.targets.trtllm.flags import flag_table
from lmi_build.targets.trtllm.profiles import get_profile
from lmi_build.targets.trtllm.since import missing_architecture, refusal, written_otherwise
from lmi_build.targets.trtllm.steps import ENCODER_DECODER_EXAMPLES, LEGACY_EXAMPLES


def recipe_route(recipe: Recipe, support: TargetSupport, profile_name: str) -> RecipeRoute:
    profile = get_profile(profile_name)
    version = profile.tensorrt_llm
    if not profile.engine_capable:
        return RecipeRoute(False, reason=f"profile {profile.name} (TensorRT-LLM {version}) cannot build engines")
    missing = missing_architecture(support.trtllm_architecture, version)
    if missing is not None:
        return RecipeRoute(False, reason=refusal(missing, profile.name, version)[0])
    table = flag_table(version)
    example = support.trtllm_example
    if example in ENCODER_DECODER_EXAMPLES:
        return RecipeRoute(False, reason=f"encoder-decoder models ({support.trtllm_architecture}) need an encoder "
                                         "and a decoder engine; lmi-build does not build that pair")
    if profile.workflow == "legacy":
        if example not in LEGACY_EXAMPLES:
            return RecipeRoute(False, reason=f"TensorRT-LLM {version} legacy builds support only "
                                             f"{', '.join(LEGACY_EXAMPLES)} examples here, not '{example}'")
        return RecipeRoute(True, route=f"examples/{table.example_dir(example or '')}/build.py in the container "
                                       f"(TensorRT-LLM {version} legacy workflow)")
    if support.modelopt_decoder and not written_otherwise(support.trtllm_architecture, version):
        return RecipeRoute(True, route=f"ModelOpt checkpoint export on this host (decoder {support.modelopt_decoder}), "
                                       "then trtllm-build")
    if not example:
        return RecipeRoute(False, reason=f"recipe {recipe.name} names no TensorRT-LLM example for the vendor converter")
    script = f"examples/{table.example_dir(example)}/convert_checkpoint.py"
    if example in (table.limits.unread_converters or ()):
        return RecipeRoute(False, reason=f"{script} of TensorRT-LLM {table.series} was not read, so lmi-build does "
                                         "not know its flags (flags.toml limits unread_converters)")
    variant = table.variants.get(example)
    for option in recipe.version_options:
        carried = option.required or option.default is not None  # then every plan passes it to the converter
        if "trtllm" in option.targets and carried and (variant is None or variant.option != option.name):
            return RecipeRoute(False, reason=f"{script} of TensorRT-LLM {table.series} has no flag lmi-build knows "
                                             f"for {option.key} (flags.toml [variants])")
    return RecipeRoute(True, route=f"{script} in the container, then trtllm-build")
