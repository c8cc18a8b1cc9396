"""Whether a model's files hold a tokenizer, from their names alone (a plan downloads none of them).

Every LMI container loads the tokenizer from the model directory it serves, which lmi-build fills from
the source model (``artifact/packager.CARRIED_PATTERNS``): DJL's handlers call
``AutoTokenizer.from_pretrained(model_id_or_path)`` on Neuron (djl-serving 0.29.0-dlc
engines/python/setup/djl_python/transformers_neuronx.py:120-127, 0.30.0-dlc :193-198) and for LMI-Dist
(0.29.0-dlc huggingface.py:138, 364-371); vLLM (0.35.0-dlc lmi_vllm/vllm_async_service.py:92-96,
``get_tokenizer`` of the engine whose tokenizer defaults to the model) and TensorRT-LLM's LLM API
(0.33.0-dlc lmi_trtllm/trtllm_async_service.py:96-101; properties_manager/trt_properties.py:36-41, 128-136)
load it from the model too unless serving.properties names another. Calibration tokenizes its samples
with it (``quantize/calibration.load_tokenizer``). A ``tokenizer_config.json`` alone is no tokenizer:
transformers then has no vocabulary to load (``AttributeError: 'NoneType' object has no attribute
'endswith'`` from LlamaTokenizerFast, transformers 4.57.6).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

# A file that holds a vocabulary transformers builds a tokenizer from: a fast tokenizer (tokenizer.json),
# a SentencePiece model (tokenizer.model, spiece.model, ice_text.model, ...), a BPE/WordPiece vocabulary
# (vocab.json + merges.txt, vocab.txt) or a tiktoken file (Qwen's qwen.tiktoken).
VOCABULARY_PATTERNS = ("tokenizer.json", "*.model", "vocab.*", "*.tiktoken")


def tokenizer_files(names: Iterable[str]) -> list[str]:
    """The top-level files among ``names`` that hold a tokenizer's vocabulary."""
    return sorted(name for name in names if "/" not in name
                  and any(fnmatchcase(name, pattern) for pattern in VOCABULARY_PATTERNS))
