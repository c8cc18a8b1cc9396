"""Issue 42 item 2: a model whose config.json ties the LM head to the embedding is planned as the
TensorRT-LLM checkpoint stores it. ModelOpt's exporter (and the streamed writer, which copies its layout)
writes a tied Llama's lm_head as a tensor of its own (share_embedding_table false); Gemma's checkpoints
share the table (data/trtllm_tensor_map.toml [tied_lm_head], cited). The estimate equals the bytes the
streamed writer writes for real on a random-weight tied Llama: tests/targets/trtllm/test_trtllm_stream.py."""

from __future__ import annotations

from lmi_build.planning.instances import GIB
from lmi_build.quantize.tensor_map import lm_head_written
from tests.fixtures_planning import Planner

LLAMA_32_3B = "meta-llama--Llama-3.2-3B-Instruct"  # tied, 3,212,749,824 parameters (its index's total_size / 2)
LLAMA_31_8B = "meta-llama--Llama-3.1-8B-Instruct"  # untied
GEMMA_2_9B = "google--gemma-2-9b"  # tied by Gemma2Config's default, 256k vocabulary


def test_a_tied_llama_counts_the_lm_head_the_checkpoint_writes(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA_32_3B, tp="1", max_output_len=1024)
    memory = plan.memory
    assert memory is not None and plan.spec.tie_word_embeddings
    head = plan.spec.vocab_size * plan.spec.hidden_size
    assert memory.num_parameters == 3_212_749_824
    assert memory.weight_bytes == (memory.num_parameters + head) * 2  # fp16: 6.7 GiB, not 6.0
    assert f"{memory.weight_bytes / GIB:.1f}" == "6.7"
    assert plan.expected_weight_bytes() == memory.weight_bytes  # the checkpoint step's progress total
    # The hf target's checkpoint is save_pretrained's: the tied table once.
    hf = plan_model("hf", LLAMA_32_3B, tp="1")
    assert hf.memory is not None and hf.memory.weight_bytes == memory.num_parameters * 2


def test_an_untied_model_is_unchanged(plan_model: Planner) -> None:
    plan = plan_model("trtllm", LLAMA_31_8B, tp="1", max_output_len=1024)
    assert plan.memory is not None and not plan.spec.tie_word_embeddings
    assert plan.memory.weight_bytes == plan.memory.num_parameters * 2


def test_gemma_2_shares_its_embedding_table(plan_model: Planner) -> None:
    """TensorRT-LLM's GemmaConfig always shares the table: its 256k x 3584 embedding is stored once."""
    plan = plan_model("trtllm", GEMMA_2_9B, tp="1", max_output_len=1024)
    assert plan.build.checkpoint_route == "vendor"  # type: ignore[union-attr]
    assert plan.memory is not None and plan.spec.tie_word_embeddings
    assert plan.memory.weight_bytes == plan.memory.num_parameters * 2


def test_the_rule_per_route() -> None:
    assert lm_head_written(tied=False, route="modelopt", decoder="gemma", example="gemma")
    assert lm_head_written(tied=True, route="modelopt", decoder="llama", example="llama")
    assert lm_head_written(tied=True, route="vendor", decoder=None, example="llama")
    assert not lm_head_written(tied=True, route="modelopt", decoder="gemma", example="gemma")
    assert not lm_head_written(tied=True, route="vendor", decoder=None, example="gemma")


def test_quantized_a_tied_head_stays_16_bit_and_counts_twice(plan_model: Planner) -> None:
    """ModelOpt leaves the embedding and lm_head unquantized: both tables at 2 bytes."""
    fp8 = plan_model("trtllm", LLAMA_32_3B, tp="1", quantize="fp8", max_output_len=1024)
    assert fp8.memory is not None
    head = fp8.spec.vocab_size * fp8.spec.hidden_size
    assert fp8.memory.weight_bytes == (fp8.memory.num_parameters - head) * 1 + 2 * head * 2


def test_the_written_checkpoint_is_checked_against_the_same_rule() -> None:
    """What was written must hold lm_head.weight exactly when the rule (and so the estimate) says."""
    from lmi_build.targets.trtllm.checkpoint import _lm_head_problems
    from lmi_build.targets.trtllm.knobs import TrtllmBuild
    from tests.conftest import FIXTURE_CONFIGS
    from tests.fixtures_quantize import make_build_plan

    plan = make_build_plan(FIXTURE_CONFIGS / LLAMA_32_3B, writer="stream")
    build = plan.knobs(TrtllmBuild)
    layers = {"transformer.vocab_embedding.weight", "transformer.ln_f.weight"}
    assert _lm_head_problems({0: layers | {"lm_head.weight"}}, plan, build) == []
    missing = _lm_head_problems({0: layers}, plan, build)
    assert len(missing) == 1 and "lm_head.weight is not written (planned: written" in missing[0]
    gemma = make_build_plan(FIXTURE_CONFIGS / "google--gemma-2b-it", decoder="gemma")
    assert _lm_head_problems({0: layers}, gemma, gemma.knobs(TrtllmBuild)) == []
    assert "is written (planned: not written" in _lm_head_problems({0: layers | {"lm_head.weight"}}, gemma,
                                                                   gemma.knobs(TrtllmBuild))[0]
