"""How the profile's vLLM / LMI-Dist sizes its KV cache at start-up (``memory.EngineKvBudget``): the
release's defaults (``profiles/*.toml`` ``[vllm_memory]``, cited) or the values serving.properties sets,
and the max_model_len the engine checks one sequence of."""

from lmi_build.planning import checks
from lmi_build.planning.context import PlanContext
from lmi_build.planning.memory import EngineKvBudget
from lmi_build.targets.hf.options import HfOptions
from lmi_build.targets.hf.profiles import HfProfile

# vLLM's max_model_len for a config with no position limit (V0 config.py / V1 config/model.py
# _get_and_verify_max_len: default_max_len = 2048).
UNBOUNDED_MAX_MODEL_LEN = 2048


def engine_kv_budget(ctx: PlanContext, profile: HfProfile, max_num_seqs: int) -> EngineKvBudget:
    facts = profile.vllm_memory
    given = ctx.user_options(HfOptions)
    # LMI-Dist 8 ("warmup") has neither option: DJL's properties manager drops them unread
    reads_options = facts.check != "warmup"
    util, util_source = facts.gpu_memory_utilization, f"the {profile.name} default"
    if not reads_options:
        util_source = f"{profile.name} reads no gpu_memory_utilization: the memory free after its warmup"
    if given.gpu_memory_utilization is not None and reads_options:
        util, util_source = given.gpu_memory_utilization, "option.gpu_memory_utilization as set"
    if given.max_model_len is not None and reads_options:
        max_model_len, len_source = given.max_model_len, "option.max_model_len"
    else:
        # vLLM derives it from config.json as max_positions does: max_position_embeddings (or the model's
        # own key), times a RoPE scaling factor unless the type is pre-extended (llama3, longrope, su).
        limit = checks.max_positions(ctx)
        max_model_len = limit or UNBOUNDED_MAX_MODEL_LEN
        default = "vLLM's default" if reads_options else "the longest request it can be sent"
        len_source = (f"the model's {ctx.spec.max_position_source or 'max_position_embeddings'}, {default}"
                      if limit else f"{default} for a model without a position limit")
    batched = given.max_rolling_batch_prefill_tokens or facts.max_num_batched_tokens
    unchunked = facts.unchunked_batched_tokens is not None and not (
        facts.chunked_above is not None and max_model_len > facts.chunked_above)
    if unchunked and given.max_rolling_batch_prefill_tokens is None:
        # V0 without chunked prefill profiles a whole max_model_len sequence in one pass
        batched = max(max_model_len, facts.unchunked_batched_tokens or 0)
    graphs = 0
    if facts.cudagraph_in_budget and facts.cudagraph_seqs_factor and facts.cudagraph_max_tokens and not given.enforce_eager:
        graphs = min(facts.cudagraph_seqs_factor * max_num_seqs, facts.cudagraph_max_tokens)
    return EngineKvBudget(gpu_memory_utilization=util, utilization_source=util_source, block_size=facts.block_size,
                          max_num_batched_tokens=batched, max_model_len=max_model_len,
                          max_model_len_source=len_source, check=facts.check_source,
                          cudagraph_tokens=graphs, checks_sequence=reads_options)
