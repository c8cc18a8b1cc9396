"""The toolkit layouts' Triton config.pbtxt: the tensorrtllm_backend model config of the profile's
backend release (data/triton_config.toml), every tensor the DJL runtime sends or reads declared."""

from __future__ import annotations

import re

import pytest

from lmi_build.targets.trtllm.layouts import read_pbtxt_parameter
from lmi_build.targets.trtllm.profiles import get_profile, load_profiles
from lmi_build.targets.trtllm.triton import backend_config, config_pbtxt
from tests.fixtures_trtllm import TrtllmPlanner

TOOLKIT = [p.name for p in load_profiles() if p.layout == "toolkit"]
# What DJL's TensorRT-LLM runtime sends or reads (docs/VENDOR-FACTS.md §3: trtllm_rolling_batch.py 67-86, 118-122)
# and the sampling inputs the issue lists.
DJL_INPUTS = ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id", "streaming", "temperature",
              "runtime_top_k", "runtime_top_p", "random_seed", "repetition_penalty", "beam_width", "stop_words_list")
DJL_OUTPUTS = ("output_ids", "sequence_length", "cum_log_probs", "output_log_probs")


@pytest.mark.parametrize("profile", TOOLKIT)
def test_every_template_tensor_is_declared(profile: str, trtllm_plan: TrtllmPlanner) -> None:
    version = get_profile(profile).tensorrt_llm
    facts = backend_config(version)
    plan = trtllm_plan(profile, tp="1", max_batch_size=24)
    text = config_pbtxt(plan, "/opt/ml/model/tensorrt_llm/1", version)
    declared = re.findall(r'^\s+name: "([^"]+)"', text, re.M)
    assert declared == [t.name for t in (*facts.input, *facts.output)]
    assert set(DJL_INPUTS) <= {t.name for t in facts.input} and set(DJL_OUTPUTS) <= {t.name for t in facts.output}
    assert 'name: "end_id"\n    data_type: TYPE_INT32\n    dims: [ 1 ]\n    reshape: { shape: [ ] }\n    optional: true' \
        in text
    assert read_pbtxt_parameter(text, "gpt_model_path") == "/opt/ml/model/tensorrt_llm/1"
    assert "max_batch_size: 24" in text and "decoupled: true" in text


@pytest.mark.parametrize(("profile", "overlap"), [("lmi-0.26.0-trtllm-0.7.1", "false"),
                                                  ("lmi-0.28.0-trtllm-0.9.0", "false"),
                                                  ("lmi-0.30.0-trtllm-0.12.0", None)])
def test_enable_trt_overlap_written_where_the_backend_reads_it(profile: str, overlap: str | None,
                                                               trtllm_plan: TrtllmPlanner) -> None:
    version = get_profile(profile).tensorrt_llm
    plan = trtllm_plan(profile, tp="1", max_batch_size=24)
    text = config_pbtxt(plan, "/opt/ml/model/tensorrt_llm/1", version)
    assert read_pbtxt_parameter(text, "enable_trt_overlap") == overlap  # 0.11+: commented out of the template


def test_backend_releases_differ_as_their_templates() -> None:
    assert "frequency_penalty" not in {t.name for t in backend_config("0.7.1").input}
    assert "frequency_penalty" in {t.name for t in backend_config("0.8.0").input}
    assert "batch_index" in {t.name for t in backend_config("0.12.0").output}
    assert "v0.12.0" in backend_config("0.12.0").source
