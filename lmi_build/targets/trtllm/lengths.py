"""The engine's sequence lengths: the user's values, else the container's defaults fitted to the model.

The LMI container's defaults (1024 input + 512 output tokens) are not a user's choice: a model with
fewer positions (GPT-2's 1024) would make every plan without flags invalid, although the container
itself would serve it. So defaults are shrunk to the model with a warning; only values the user set
are errors (``checks.check_total_length``).
"""

from lmi_build.planning import checks
from lmi_build.planning.context import PlanContext
from lmi_build.targets.trtllm.options import TrtllmOptions
from lmi_build.targets.trtllm.profiles import ContainerProfile

# LMI defaults of the TensorRT-LLM container (seed 000) when neither user nor recipe sets them.
DEFAULT_MAX_INPUT_LEN = 1024
DEFAULT_MAX_OUTPUT_LEN = 512
# profiles/*.toml [defaults] max_seq_len = "model": the release's JIT leaves max_seq_len to trtllm-build,
# which takes the model's max_position_embeddings when no output length is given.
SEQ_LEN_FROM_MODEL = "model"


def resolve_lengths(ctx: PlanContext, profile: ContainerProfile, given: TrtllmOptions,
                    user: TrtllmOptions) -> tuple[int, int, int]:
    """(max_input_len, max_output_len, max_seq_len) of the options ``given`` (``user``: those the user set),
    else the defaults fitted: the values of ``TrtllmBuild``'s fields of those names."""
    limit = checks.max_positions(ctx)
    input_set, output_set = user.max_input_len is not None, user.max_output_len is not None
    max_input = given.max_input_len or DEFAULT_MAX_INPUT_LEN
    max_output = given.max_output_len or DEFAULT_MAX_OUTPUT_LEN
    if limit is not None and max_input + max_output > limit and not (input_set and output_set):
        fitted_input, fitted_output = _fit(limit, max_input, max_output, input_set=input_set, output_set=output_set)
        if fitted_input >= 1 and fitted_output >= 1:
            ctx.findings.warn("max_len_fitted",
                              f"the default lengths max_input_len + max_output_len ({max_input} + {max_output}) "
                              f"exceed the model's {limit} positions; fitted to {fitted_input} + {fitted_output}",
                              hint="set --max-input-len/--max-output-len to choose them yourself")
            max_input, max_output = fitted_input, fitted_output
    checks.check_total_length(
        ctx, max_input + max_output, f"max_input_len + max_output_len ({max_input} + {max_output})",
        "lower --max-input-len/--max-output-len so that they sum to at most {limit}",
    )
    max_seq = max_input + max_output
    if (profile.defaults.get("max_seq_len") == SEQ_LEN_FROM_MODEL and not output_set and limit is not None
            and limit > max_seq):
        # As the container's JIT builds it: trtllm-build takes max_seq_len from the model.
        max_seq, max_output = limit, limit - max_input
        # Said, with where it comes from: --help's "512" is not what this profile builds, and the KV
        # cache grows with it (130048 output tokens for Llama-3.2-3B) (issue 30 item 7).
        ctx.findings.warn("max_output_len_from_model",
                          f"max_output_len {max_output} = the model's {limit} positions - max_input_len {max_input}: "
                          f"profile {profile.name} leaves max_seq_len to the model, as its container's trtllm-build "
                          "does when no output length is given",
                          hint="set --max-output-len to compile for shorter outputs (a smaller KV cache)")
    return max_input, max_output, max_seq


def _fit(limit: int, max_input: int, max_output: int, *, input_set: bool, output_set: bool) -> tuple[int, int]:
    """Shrink the default side(s) so that input + output fit ``limit``; the user's side stays."""
    if input_set:
        return max_input, limit - max_input
    if output_set:
        return limit - max_output, max_output
    output = min(max_output, limit // 2)
    return min(max_input, limit - output), output
