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

import contextlib
import copy
import hashlib
import json
import math
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lmi_build.core.errors import StepError
from lmi_build.core.fs import atomic_write_json
from lmi_build.core.paths import cache_root
from lmi_build.core.reading import BadFile, read_json_file, read_regular_bytes
from lmi_build.core.versions import installed_versions
from lmi_build.quantize.safetensors_files import (
    ST_DTYPE_OF_TORCH,
    TORCH_DTYPE_OF_ST,
    encode_header,
    read_header,
)
from lmi_build.quantize.tensor_map import LAYER, Family, TensorRule, family_for
from lmi_build.quantize.trtllm_model_check import model_problems
from lmi_build.reporting import output


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
_LAYOUT_FORMAT = 2  # bump when the entry changes: older entries are then never read (2: schema + digest)
_LAYOUT_DIR = "layouts"


class _CachedTensor(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    shape: list[Annotated[int, Field(ge=0)]]
    dtype: Literal["float16", "bfloat16", "float32"]  # the keys of ST_DTYPE_OF_TORCH


class _CachedRank(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    rank: Annotated[int, Field(ge=0)]
    config: dict[str, Any]
    quant_config: dict[str, Any]
    tensors: Annotated[dict[str, _CachedTensor], Field(min_length=1)]


class _LayoutEntry(BaseModel):
    """One cache entry: the key it was stored under, the layout, and the digest of the layout."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    format: Literal[2]
    key: str
    digest: str
    ranks: Annotated[list[_CachedRank], Field(min_length=1)]


@dataclass(frozen=True)
class Layouts:
    """ModelOpt's layout of every rank, and the cache entry it was read from (None: computed now)."""

    ranks: list[RankLayout]
    cached_from: Path | None = None


def modelopt_layout(model_dir: Path, decoder: str, dtype: str, tp: int, pp: int, *,
                    use_cache: bool = True, refresh: bool = False) -> Layouts:
    """ModelOpt's checkpoint layout for the model in ``model_dir``, computed without its weights.

    Computing it imports ModelOpt's exporter (about 7 s on a small CPU host, more than the whole
    conversion of a small model) and depends only on config.json, the knobs and the exporter
    versions, so it is kept under the cache directory by a key over exactly those. An entry is used
    only when it is a regular file (never a link), matches the schema, carries the digest of its
    content and the key it is found under, and describes the model and the knobs
    (``_entry_problem``); anything else is a miss that is computed again, replaces the entry and is
    reported in one warning naming it. ``use_cache=False`` (``--no-cache``) neither reads nor
    writes the cache; ``refresh`` computes it again and replaces the entry without reading it."""
    if not use_cache:
        return Layouts(_exported_layout(model_dir, decoder, dtype, tp, pp))
    model_config = _model_config(model_dir)
    key = _layout_key(model_dir, decoder, dtype, tp, pp)
    directory = cache_root() / _LAYOUT_DIR
    entry = directory / f"{key}.json"
    if not refresh:
        cached, problem = _read_layout(entry, key, model_config, dtype=dtype, tp=tp, pp=pp)
        if cached is not None:
            return Layouts(cached, cached_from=entry)
        if problem is not None:
            output.current().warn(f"the layout cache entry {entry} is not usable ({problem}); "
                                  "computing the layout again and replacing the entry")
    layouts = _exported_layout(model_dir, decoder, dtype, tp, pp)
    _store_layout(directory, entry, key, layouts)
    return Layouts(layouts)


def evict_layout(entry: Path, reason: str) -> None:
    """Remove a cache entry that passed its checks on read but made a checkpoint that did not."""
    output.current().warn(f"the layout cache entry {entry} made a checkpoint that fails its checks ({reason}); "
                          "computing the layout again and replacing the entry")
    with contextlib.suppress(OSError):
        entry.unlink()


def _layout_key(model_dir: Path, decoder: str, dtype: str, tp: int, pp: int) -> str:
    config = read_regular_bytes(model_dir / "config.json", what="model config")
    identity = {"format": _LAYOUT_FORMAT, "config": hashlib.sha256(config).hexdigest(), "decoder": decoder,
                "dtype": dtype, "tp": tp, "pp": pp, "versions": installed_versions(LAYOUT_VERSIONS)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _model_config(model_dir: Path) -> dict[str, Any]:
    config = read_json_file(model_dir / "config.json", what="model config")
    if not isinstance(config, dict):
        raise StepError(f"{model_dir.name}/config.json is not a JSON object", hint="fix or re-download the model")
    return config


def _ranks_json(layouts: list[RankLayout]) -> list[dict[str, Any]]:
    return [{"rank": layout.rank, "config": layout.config, "quant_config": layout.quant_config,
             "tensors": {name: {"shape": list(shape), "dtype": kind} for name, (shape, kind) in layout.tensors.items()}}
            for layout in layouts]


def _digest(ranks: list[dict[str, Any]]) -> str:
    canonical = json.dumps(ranks, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _store_layout(directory: Path, entry: Path, key: str, layouts: list[RankLayout]) -> None:
    """Write the entry (a link or anything else in its place is replaced, never written through);
    a cache that cannot be written costs the next build time, nothing else."""
    ranks = _ranks_json(layouts)
    content = {"format": _LAYOUT_FORMAT, "key": key, "digest": _digest(ranks), "ranks": ranks}
    with contextlib.suppress(OSError):
        if _planted(directory):
            output.current().warn(f"{directory} is not a directory of lmi-build's (a link or a file); "
                                  "the layout is not cached")
            return
        directory.mkdir(parents=True, exist_ok=True)
        if entry.is_symlink() or (entry.exists() and not entry.is_file()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        atomic_write_json(entry, content, indent=None)  # a rename: replaces a link, never follows it


def _planted(directory: Path) -> bool:
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return False
    return not stat.S_ISDIR(info.st_mode)


def _read_layout(entry: Path, key: str, model_config: dict[str, Any], *, dtype: str, tp: int,
                 pp: int) -> tuple[list[RankLayout] | None, str | None]:
    """(the layout, None) from a usable entry; (None, why) from an unusable one; (None, None) on a miss."""
    try:
        info = entry.lstat()
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"unreadable: {error.strerror or error}"
    if _planted(entry.parent):
        return None, f"{entry.parent} is a link or not a directory"
    if stat.S_ISLNK(info.st_mode):
        return None, "a symbolic link, never followed"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    try:
        parsed = _LayoutEntry.model_validate(read_json_file(entry, what="layout cache entry", follow=False))
    except BadFile as error:
        return None, error.message.replace(f" {entry}", "")
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        return None, f"{where}: {first['msg']}"
    ranks = [rank.model_dump() for rank in parsed.ranks]
    if parsed.key != key:
        return None, "stored under another key"
    if parsed.digest != _digest(ranks):
        return None, "its content does not match its digest"
    layouts = [RankLayout(rank=rank.rank, config=rank.config, quant_config=rank.quant_config,
                          tensors={name: (tuple(tensor.shape), tensor.dtype) for name, tensor in rank.tensors.items()})
               for rank in parsed.ranks]
    problem = _entry_problem(layouts, model_config, dtype=dtype, tp=tp, pp=pp)
    return (None, problem) if problem else (layouts, None)


def _entry_problem(layouts: list[RankLayout], model_config: dict[str, Any], *, dtype: str, tp: int,
                   pp: int) -> str | None:
    """Why a parsed layout is not ModelOpt's layout of this model for these knobs (None: it is)."""
    if [layout.rank for layout in layouts] != list(range(tp * pp)):
        return f"ranks {[layout.rank for layout in layouts][:8]}, not 0-{tp * pp - 1}"
    expected_mapping = {"world_size": tp * pp, "tp_size": tp, "pp_size": pp}
    for layout in layouts:
        mapping = layout.config.get("mapping")
        if not isinstance(mapping, dict) or any(mapping.get(k) != v for k, v in expected_mapping.items()):
            return f"rank {layout.rank}'s mapping is {mapping!r}, the knobs make {expected_mapping}"
        if layout.config.get("rank") not in (None, layout.rank):
            return f"rank {layout.rank}'s config says rank {layout.config.get('rank')!r}"
        if layout.config.get("dtype") != dtype:
            return f"rank {layout.rank}'s config has dtype {layout.config.get('dtype')!r}, the knobs {dtype}"
    try:
        config = json.loads(checkpoint_jsons(layouts)["config.json"])
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        return f"its config cannot be written ({type(error).__name__})"
    problems = model_problems(config, {layout.rank: set(layout.tensors) for layout in layouts}, model_config,
                              tp=tp, pp=pp)
    return "; ".join(problems[:3]) if problems else None


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


@dataclass(frozen=True)
class StreamedCheckpoint:
    """What ``write_streamed_checkpoint`` wrote: the bytes of weights, and the layout cache entry
    it was written from (None: the layout was computed by this call)."""

    weight_bytes: int
    layout_entry: Path | None


def write_streamed_checkpoint(model_dir: Path, out_dir: Path, *, architecture: str | None, decoder: str,
                              dtype: str, tp: int, pp: int, use_cache: bool = True,
                              refresh: bool = False, progress: output.ByteCount | None = None) -> StreamedCheckpoint:
    """Write ModelOpt's unquantized TensorRT-LLM checkpoint for ``model_dir`` into ``out_dir``.
    Raises ``LayoutMismatch`` before writing anything when the tensor map does not reproduce
    ModelOpt's layout (a cached layout the map cannot make is evicted and computed again first).
    ``use_cache`` / ``refresh``: the layout cache's (``modelopt_layout``). ``progress`` is told the
    bytes of every tensor piece as it is written (the rank files are preallocated: their sizes
    read complete from the start)."""
    family = family_for(architecture)
    if family is None:
        raise LayoutMismatch(f"the tensor map has no entry for {architecture}")
    if progress is not None:
        progress.stage("reading ModelOpt's layout")
    layouts = modelopt_layout(model_dir, decoder, dtype, tp, pp, use_cache=use_cache, refresh=refresh)
    source = SourceTensors(model_dir)
    try:
        jobs = _checked_jobs(layouts.ranks, family, source, tp)
    except LayoutMismatch as mismatch:
        if layouts.cached_from is None:
            raise
        evict_layout(layouts.cached_from, str(mismatch))
        layouts = modelopt_layout(model_dir, decoder, dtype, tp, pp, refresh=True)
        jobs = _checked_jobs(layouts.ranks, family, source, tp)
    if progress is not None:
        progress.stage("")
    written = _write_ranks(layouts.ranks, jobs, source, out_dir, tp, progress.add if progress is not None else None)
    return StreamedCheckpoint(written, layouts.cached_from)


def _checked_jobs(layouts: list[RankLayout], family: Family, source: SourceTensors, tp: int) -> list[_Job]:
    jobs = plan_jobs(layouts, family, source, tp)
    # Check every piece's shape before the first byte is written (shapes only: no data read yet).
    for job in jobs:
        expected = _piece_shape(job, source, tp)
        if expected != job.shape:
            raise LayoutMismatch(f"{job.name} of rank {job.rank}: the tensor map makes {list(expected)}, "
                                 f"ModelOpt writes {list(job.shape)}")
    return jobs


def _write_ranks(layouts: list[RankLayout], jobs: list[_Job], source: SourceTensors, out_dir: Path, tp: int,
                 written: Callable[[int], None] | None = None) -> int:
    """Every rank file, tensor by tensor, and the JSON files; the bytes of weights written (each
    piece's also to ``written`` as it lands)."""
    import torch

    files = _rank_files(layouts, jobs, out_dir)
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
                if written is not None:
                    written(piece.numel() * piece.element_size())
                del piece
            del tensors
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)
    for name, text in checkpoint_jsons(layouts).items():
        (out_dir / name).write_text(text)
    return sum(rank_file.size for rank_file in files.values())


def chunk_length(length: int, parts: int, index: int) -> int:
    """The length of ``torch.chunk(x, parts)[index]`` along the chunked dimension of length ``length``:
    pieces of ceil(length / parts), the last one shorter, and fewer pieces than ``parts`` when they
    run out (then, as torch's indexing does, IndexError)."""
    size = -(-length // parts)
    start = index * size
    if start >= length:
        raise IndexError(f"piece {index} of {length} cut into pieces of {size}")
    return min(size, length - start)


def piece_shape(rule: TensorRule, shapes: list[tuple[int, ...]], tp: int, tp_rank: int) -> tuple[int, ...]:
    """The shape ``cut`` gives, from the sources' shapes alone. Arithmetic, not ``cut`` on meta
    tensors: a meta ``torch.cat`` imports torch._dynamo (800 modules, ~90 MB and seconds of CPU) into a
    conversion that needs none of it."""
    first = shapes[0]
    if rule.split == "replicate":
        return tuple(first)
    if rule.split == "columns":
        return (first[0], chunk_length(first[1], tp, tp_rank), *first[2:])
    if rule.split == "rows_each":
        return (sum(chunk_length(shape[0], tp, tp_rank) for shape in shapes), *first[1:])
    return (chunk_length(first[0] + -first[0] % tp, tp, tp_rank), *first[1:])


def _piece_shape(job: _Job, source: SourceTensors, tp: int) -> tuple[int, ...]:
    return piece_shape(job.rule, [tuple(source.shape(name)) for name in job.sources], tp, job.tp_rank)


def _pwrite_all(descriptor: int, data: memoryview, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(descriptor, view, offset)
        view = view[written:]
        offset += written
