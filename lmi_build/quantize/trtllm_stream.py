"""Unquantized TensorRT-LLM checkpoints written a few tensors at a time, never the whole model.

ModelOpt's exporter needs the model loaded and builds every rank's tensors before it writes
(peak RSS 1.66x the fp16 model on disk for tp1, 1.93x for tp2, measured with
``benchmarks/quantize.py``). Without quantization the conversion is renames, the q/k/v
concatenation, tensor-parallel slices, vocabulary padding and a dtype cast, so it streams: the
tensors of one layer are read (plain reads, not a memory map, whose touched pages would stay
resident), every rank's pieces are cut and written at their offsets, and they are dropped.

It is ModelOpt's checkpoint, not a second opinion of it:
- every rank's config.json and tensor names, shapes and dtypes come from ModelOpt's exporter run
  on a weightless model under FakeTensorMode (shapes only; a fraction of a second);
- the tensor map (``data/trtllm_tensor_map.toml``) says which HF tensors make each one; a tensor
  it cannot make, or makes with another shape or dtype, is a ``LayoutMismatch`` and the caller
  exports with ModelOpt instead.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmi_build.errors import StepError
from lmi_build.fs import atomic_write_json
from lmi_build.paths import cache_root
from lmi_build.quantize.safetensors_files import (
    ST_DTYPE_OF_TORCH,
    TORCH_DTYPE_OF_ST,
    encode_header,
    read_header,
)
from lmi_build.quantize.tensor_map import LAYER, Family, TensorRule, family_for
from lmi_build.reading import BadFile, read_json_file, read_regular_bytes
from lmi_build.versions import installed_versions


class LayoutMismatch(Exception):
    """The tensor map does not produce ModelOpt's layout for this model (the reason is the message)."""


@dataclass(frozen=True)
class RankLayout:
    """One rank's file as ModelOpt would write it: its config and its tensors, in order."""

    rank: int
    config: dict[str, Any]
    quant_config: dict[str, Any]
    tensors: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, torch dtype name, e.g. "float16")


# The exporter versions a layout depends on (read from package metadata: nothing is imported).
LAYOUT_VERSIONS = ("nvidia-modelopt", "transformers", "torch")
_LAYOUT_FORMAT = 1  # bump when RankLayout changes: older entries are then never read


def modelopt_layout(model_dir: Path, decoder: str, dtype: str, tp: int, pp: int) -> list[RankLayout]:
    """ModelOpt's checkpoint layout for the model in ``model_dir``, computed without its weights.

    Computing it imports ModelOpt's exporter (about 7 s on a small CPU host, more than the whole
    conversion of a small model) and depends only on config.json, the knobs and the exporter
    versions, so it is kept under the cache directory by a key over exactly those; an entry that
    cannot be read back whole is a miss and is computed again."""
    entry = cache_root() / "layouts" / f"{_layout_key(model_dir, decoder, dtype, tp, pp)}.json"
    cached = _read_layout(entry)
    if cached is not None:
        return cached
    layouts = _exported_layout(model_dir, decoder, dtype, tp, pp)
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next build time, nothing else
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(entry, [dataclasses.asdict(layout) for layout in layouts], indent=None)
    return layouts


def _layout_key(model_dir: Path, decoder: str, dtype: str, tp: int, pp: int) -> str:
    config = read_regular_bytes(model_dir / "config.json", what="model config")
    identity = {"format": _LAYOUT_FORMAT, "config": hashlib.sha256(config).hexdigest(), "decoder": decoder,
                "dtype": dtype, "tp": tp, "pp": pp, "versions": installed_versions(LAYOUT_VERSIONS)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _read_layout(entry: Path) -> list[RankLayout] | None:
    if not entry.is_file():
        return None
    try:
        return [RankLayout(rank=int(item["rank"]), config=dict(item["config"]),
                           quant_config=dict(item["quant_config"]),
                           tensors={str(name): (tuple(int(d) for d in shape), str(kind))
                                    for name, (shape, kind) in item["tensors"].items()})
                for item in read_json_file(entry, what="layout cache entry")]
    except (BadFile, KeyError, TypeError, ValueError, AttributeError):
        return None


def _exported_layout(model_dir: Path, decoder: str, dtype: str, tp: int, pp: int) -> list[RankLayout]:
    import torch
    from modelopt.torch.export.model_config_export import torch_to_tensorrt_llm_checkpoint
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM

    # trust_remote_code stays off: the tensor map only names architectures transformers ships.
    config = AutoConfig.from_pretrained(str(model_dir), trust_remote_code=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    layouts = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        for rank_config, weights, quant_config in torch_to_tensorrt_llm_checkpoint(
                model, decoder, getattr(torch, dtype),
                inference_tensor_parallel=tp, inference_pipeline_parallel=pp):
            layouts.append(RankLayout(
                rank=int(rank_config["rank"]),
                config=rank_config,
                quant_config=quant_config,
                tensors={name: (tuple(int(d) for d in value.shape), str(value.dtype).removeprefix("torch."))
                         for name, value in weights.items()},
            ))
    return layouts


def checkpoint_jsons(layouts: list[RankLayout]) -> dict[str, str]:
    """config.json (and quant_cfg.json) as ModelOpt's ``export_tensorrt_llm_checkpoint`` writes them
    from the last rank (nvidia-modelopt 0.47.0, model_config_export.py:495-527): with per-layer
    quantization information (always present since 0.47, empty when unquantized) the config keeps
    only quant_algo and kv_cache_quant_algo and the rest goes to quant_cfg.json; otherwise the
    config lists ``exclude_modules``."""
    last = layouts[-1]
    config = copy.deepcopy(last.config)
    files: dict[str, str] = {}
    if "quantized_layers" in last.quant_config:
        config["quantization"] = {key: last.quant_config[key] for key in ("quant_algo", "kv_cache_quant_algo")}
        files["quant_cfg.json"] = json.dumps(last.quant_config, indent=4)
    elif config.get("quantization"):
        config["quantization"]["exclude_modules"] = list(config["quantization"].get("exclude_modules") or {})
    files["config.json"] = json.dumps(config, indent=4)
    return files


@dataclass
class _Job:
    """One tensor of one rank: what to read, how to cut it, where to write it."""

    rank: int
    tp_rank: int
    name: str
    rule: TensorRule
    sources: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str
    offset: int = 0  # absolute position in the rank file


@dataclass
class _RankFile:
    path: Path
    header: bytes  # length prefix + JSON header: the data starts right after it
    size: int  # bytes of tensor data


class SourceTensors:
    """The HF checkpoint's tensors by name, read on demand with plain reads (no memory map)."""

    def __init__(self, model_dir: Path) -> None:
        self._where: dict[str, tuple[Path, dict[str, Any], int]] = {}
        shards = sorted(model_dir.glob("*.safetensors"))
        if not shards:
            raise StepError(f"{model_dir.name} has no *.safetensors weights; lmi-build loads safetensors only",
                            hint="convert the checkpoint to safetensors first")
        for shard in shards:
            header, data_start = read_header(shard)
            header.pop("__metadata__", None)
            for name, info in header.items():
                self._where[name] = (shard, info, data_start)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self._where[name][1]["shape"])

    def read(self, name: str) -> Any:
        import torch

        shard, info, data_start = self._where[name]
        begin, end = (data_start + int(position) for position in info["data_offsets"])
        raw = torch.empty(end - begin, dtype=torch.uint8)
        with open(shard, "rb") as handle:
            handle.seek(begin)
            if handle.readinto(raw.numpy().data) != end - begin:
                raise StepError(f"{shard.name} is shorter than its header says", hint="re-download the model")
        return raw.view(TORCH_DTYPE_OF_ST[info["dtype"]]).reshape(info["shape"])


def plan_jobs(layouts: list[RankLayout], family: Family, source: SourceTensors,
              tp: int) -> list[_Job]:
    """Every tensor of every rank with the HF tensors that make it; ``LayoutMismatch`` when the map
    cannot name a tensor ModelOpt writes or its sources are not in the checkpoint."""
    patterns = [(rule, rule.pattern()) for rule in family.tensors]
    first_layer = _first_layers(layouts, tp)
    jobs = []
    for layout in layouts:
        tp_rank = layout.rank % tp  # TensorRT-LLM Mapping: rank = pp_rank * tp + tp_rank
        for name, (shape, dtype) in layout.tensors.items():
            rule, match = _match(patterns, name)
            if rule is None or match is None:
                raise LayoutMismatch(f"ModelOpt writes {name}, which the tensor map does not make")
            layer = first_layer[layout.rank] + int(match.group(1)) if match.groups() else None
            sources = _sources(rule, layer, source)
            jobs.append(_Job(layout.rank, tp_rank, name, rule, sources, shape, dtype))
    return jobs


def _match(patterns: list[tuple[TensorRule, re.Pattern[str]]], name: str) -> tuple[TensorRule | None, Any]:
    for rule, pattern in patterns:
        found = pattern.match(name)
        if found:
            return rule, found
    return None, None


def _first_layers(layouts: list[RankLayout], tp: int) -> dict[int, int]:
    """The global index of each rank's layer 0: pipeline ranks hold consecutive layers numbered from 0."""
    counts = {layout.rank: len({m.group(1) for n in layout.tensors if (m := re.match(r"transformer\.layers\.(\d+)\.", n))})
              for layout in layouts}
    first: dict[int, int] = {}
    for rank in sorted(counts):
        pp_rank, tp_rank = divmod(rank, tp)
        first[rank] = sum(counts[p * tp + tp_rank] for p in range(pp_rank))
    return first


def _sources(rule: TensorRule, layer: int | None, source: SourceTensors) -> tuple[str, ...]:
    choices = [tuple(n.replace(LAYER, str(layer)) for n in names) for names in (rule.hf, rule.hf_else)]
    for resolved in choices:
        if resolved and all(n in source for n in resolved):
            return resolved
    raise LayoutMismatch(f"{', '.join(choices[0])}, needed for {rule.trtllm}, is not in the checkpoint")


def cut(rule: TensorRule, tensors: list[Any], tp: int, tp_rank: int) -> Any:
    """The rank's piece of the tensor ``rule`` makes from ``tensors`` (ModelOpt's split, see the map)."""
    import torch

    if rule.split == "replicate":
        return tensors[0]
    if rule.split == "columns":
        return torch.chunk(tensors[0], tp, dim=1)[tp_rank]
    if rule.split == "rows_each":
        return torch.cat([torch.chunk(t, tp, dim=0)[tp_rank] for t in tensors], dim=0)
    whole = tensors[0]
    padding = -whole.shape[0] % tp
    if padding:  # ModelOpt pads rows with zeros to a multiple of tp (pad_weights)
        whole = torch.nn.functional.pad(whole, (0, 0, 0, padding), "constant", 0)
    return torch.chunk(whole, tp, dim=0)[tp_rank]


def _rank_files(layouts: list[RankLayout], jobs: list[_Job], out_dir: Path) -> dict[int, _RankFile]:
    """Headers first: every tensor's size is known from the layout, so each job knows its offset."""
    files: dict[int, _RankFile] = {}
    for layout in layouts:
        header: dict[str, Any] = {}
        position = 0
        rank_jobs = [job for job in jobs if job.rank == layout.rank]
        for job in rank_jobs:
            st_dtype, itemsize = ST_DTYPE_OF_TORCH[job.dtype]
            size = math.prod(job.shape) * itemsize
            header[job.name] = {"dtype": st_dtype, "shape": list(job.shape), "data_offsets": [position, position + size]}
            job.offset = position
            position += size
        encoded = encode_header(header)
        for job in rank_jobs:
            job.offset += len(encoded)
        files[layout.rank] = _RankFile(out_dir / f"rank{layout.rank}.safetensors", encoded, position)
    return files


def _groups(jobs: list[_Job]) -> Iterator[tuple[tuple[str, ...], list[_Job]]]:
    """Jobs that read the same HF tensors, in order of first need: each set is read once."""
    grouped: dict[tuple[str, ...], list[_Job]] = {}
    for job in jobs:
        grouped.setdefault(job.sources, []).append(job)
    yield from grouped.items()


def write_streamed_checkpoint(model_dir: Path, out_dir: Path, *, architecture: str | None, decoder: str,
                              dtype: str, tp: int, pp: int) -> int:
    """Write ModelOpt's unquantized TensorRT-LLM checkpoint for ``model_dir`` into ``out_dir``;
    returns the bytes of weights written. Raises ``LayoutMismatch`` before writing anything when the
    tensor map does not reproduce ModelOpt's layout."""
    import torch

    family = family_for(architecture)
    if family is None:
        raise LayoutMismatch(f"the tensor map has no entry for {architecture}")
    layouts = modelopt_layout(model_dir, decoder, dtype, tp, pp)
    source = SourceTensors(model_dir)
    jobs = plan_jobs(layouts, family, source, tp)
    files = _rank_files(layouts, jobs, out_dir)
    # Check every piece's shape before the first byte is written (shapes only: no data read yet).
    for job in jobs:
        expected = _piece_shape(job, source, tp)
        if expected != job.shape:
            raise LayoutMismatch(f"{job.name} of rank {job.rank}: the tensor map makes {list(expected)}, "
                                 f"ModelOpt writes {list(job.shape)}")
    descriptors = {}
    try:
        for rank, rank_file in files.items():
            descriptor = os.open(rank_file.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            descriptors[rank] = descriptor
            os.write(descriptor, rank_file.header)
            os.ftruncate(descriptor, len(rank_file.header) + rank_file.size)
        for names, group in _groups(jobs):
            tensors = [source.read(name) for name in names]
            for job in group:
                piece = cut(job.rule, tensors, tp, job.tp_rank).to(getattr(torch, job.dtype)).contiguous()
                _pwrite_all(descriptors[job.rank], piece.view(torch.uint8).numpy().data, job.offset)
                del piece
            del tensors
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)
    for name, text in checkpoint_jsons(layouts).items():
        (out_dir / name).write_text(text)
    return sum(rank_file.size for rank_file in files.values())


def _piece_shape(job: _Job, source: SourceTensors, tp: int) -> tuple[int, ...]:
    """The shape ``cut`` gives, from the sources' shapes alone (the same cut, on meta tensors)."""
    import torch

    empty = [torch.empty(source.shape(name), device="meta") for name in job.sources]
    return tuple(cut(job.rule, empty, tp, job.tp_rank).shape)


def _pwrite_all(descriptor: int, data: memoryview, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(descriptor, view, offset)
        view = view[written:]
        offset += written
