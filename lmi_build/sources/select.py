"""Which files of a model repository a build reads, and which a plan reads.

Shared by every source so a directory, a Hugging Face repo and an S3 prefix holding the same
model select the same files (and so get the same digest)."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatch
from pathlib import PurePosixPath

from lmi_build.core.errors import SourceError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
SAFETENSORS_SUFFIX = ".safetensors"

# Small metadata a plan needs: the config, quantization configs, and the weight index.
PLAN_FILES = (
    "config.json",
    "generation_config.json",
    "hf_quant_config.json",
    "quant_config.json",
    "quantize_config.json",
    "quantization_config.json",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)

# Never needed by a build: other frameworks' weights, Meta's original checkpoints, repo clutter.
_EXCLUDED_DIRS = ("original", "consolidated", ".git", ".cache", "onnx", "openvino", "coreml", "gguf")
_EXCLUDED_PATTERNS = (
    "consolidated.*",
    "*.gguf",
    "*.ggml",
    "*.onnx",
    "*.onnx_data",
    "*.msgpack",
    "*.h5",
    "*.tflite",
    "*.ot",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "*.mlmodel",
    "*.md",
    ".gitattributes",
    "*.png",
    "*.jpg",
    "*.gif",
    "*.lock",
)


def _excluded(rel: str) -> bool:
    path = PurePosixPath(rel)
    if any(part in _EXCLUDED_DIRS for part in path.parts[:-1]):
        return True
    return any(fnmatch(path.name, pattern) for pattern in _EXCLUDED_PATTERNS)


def is_pickle(rel: str) -> bool:
    return rel.endswith(PICKLE_SUFFIXES)


def select_build_files(names: Iterable[str], *, source: str, allow_pickle: bool) -> list[str]:
    """The files a build reads, sorted. Pickle weights are dropped when safetensors exist and
    refused when they are the only weights, unless ``allow_pickle``."""
    candidates = sorted(n for n in names if not _excluded(n))
    has_safetensors = any(n.endswith(SAFETENSORS_SUFFIX) for n in candidates)
    pickles = [n for n in candidates if is_pickle(n)]
    if has_safetensors:
        return [n for n in candidates if not is_pickle(n) and not n.endswith(".bin.index.json")]
    if pickles and not allow_pickle:
        raise SourceError(
            f"{source} has only pickle weights ({pickles[0]}{' …' if len(pickles) > 1 else ''}); "
            "loading pickle can run arbitrary code",
            hint="pass --allow-pickle if you trust this model, or use a revision with .safetensors weights",
        )
    return candidates


def select_plan_files(names: Iterable[str]) -> list[str]:
    """The small metadata files a plan reads (those that exist)."""
    present = set(names)
    return [name for name in PLAN_FILES if name in present]


def has_weights(names: Iterable[str]) -> bool:
    return any(n.endswith(SAFETENSORS_SUFFIX) or is_pickle(n) for n in names)
