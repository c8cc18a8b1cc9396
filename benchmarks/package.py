"""Benchmark: packaging a ~2 GB model against the shell baseline `cp -r` followed by `sha256sum` of
the same files: the default mode with the user's writable source (cloned copy-on-write where the file
system can, else copied: no output shares a writable file with the model), the same with a read-only
source (hard-linked), and --copy.

    python benchmarks/package.py                 # 2 GiB in 4 shards, best of 2 runs
    python benchmarks/package.py --size-gib 0.5 --shards 2 --repeat 1 --json

The shards are real safetensors files (one uint8 tensor of random bytes each) so the hf layout's
checks pass; the tokenizer files are small JSON. Every run starts with the files in the page cache
(they were just written), as in a pipeline that packages right after the build step. The packager
hashes with threads (hashlib releases the GIL), ``sha256sum`` with one process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's lmi_build and benchmarks

from benchmarks import record_comparison, write_safetensors
from lmi_build.artifact.manifest import BuildRecord
from lmi_build.artifact.packager import package
from lmi_build.artifact.verify import verify_local
from lmi_build.core.types import ModelIdentity
from lmi_build.model.spec import ModelSpec
from lmi_build.planning.plan import BuildPlan, ToolchainRef
from lmi_build.targets import TARGETS
from lmi_build.targets.hf.knobs import HfBuild


def write_model(directory: Path, size_bytes: int, shards: int) -> None:
    directory.mkdir(parents=True)
    weight_map: dict[str, str] = {}
    for index in range(shards):
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(directory / name, size_bytes // shards)
        weight_map[Path(name).stem] = name
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (directory / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    (directory / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>"}))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))


def bench_plan() -> BuildPlan:
    spec = ModelSpec(model_type="llama", architectures=("LlamaForCausalLM",), hidden_size=4096, num_layers=32,
                     num_attention_heads=32, num_kv_heads=32, head_dim=128, vocab_size=32000, num_parameters=10**9)
    return BuildPlan(target="hf", recipe="llama", recipe_version=1,
                     model=ModelIdentity(kind="local", id="bench-model"), spec=spec,
                     options={"engine": "Python", "option.tensor_parallel_degree": "1"}, option_sources={},
                     build=HfBuild(tp=1, dtype="float16"), toolchain=ToolchainRef(target="hf"),
                     cache_key="sha256:" + "0" * 64, valid=True)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def baseline(source: Path, destination: Path) -> None:
    subprocess.run(["cp", "-r", str(source), str(destination)], check=True)
    files = sorted(str(p) for p in destination.iterdir())
    subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs per method")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="lmi-build-bench-", dir=args.dir))
    try:
        source = work / "model"
        size = int(args.size_gib * 1024**3)
        write_time = timed(lambda: write_model(source, size, args.shards))
        total = sum(p.stat().st_size for p in source.iterdir())
        plan = bench_plan()
        results: dict[str, list[float]] = {"cp -r + sha256sum": [], "package (writable source)": [],
                                           "package (read-only source)": [], "package (copy)": [],
                                           "verify (rehash)": []}
        shards = sorted(source.glob("*.safetensors"))
        for run in range(args.repeat):
            out = work / f"baseline-{run}"
            results["cp -r + sha256sum"].append(timed(lambda out=out: baseline(source, out)))  # type: ignore[misc]
            shutil.rmtree(out)
            for mode, copy in (("writable source", False), ("read-only source", False), ("copy", True)):
                target = work / f"artifact-{mode.replace(' ', '-')}-{run}"
                for shard in shards:
                    shard.chmod(0o444 if mode == "read-only source" else 0o644)
                results[f"package ({mode})"].append(timed(lambda target=target, copy=copy: package(  # type: ignore[misc]
                    plan, target=TARGETS["hf"], layout=TARGETS["hf"].layouts()["hf"], produced=source, source_dir=source,
                    output_dir=target,
                    record=BuildRecord(), copy=copy)))
                if mode == "copy":
                    results["verify (rehash)"].append(timed(lambda target=target: verify_local(target, TARGETS)))  # type: ignore[misc]
                shutil.rmtree(target)
        best = {name: min(times) for name, times in results.items()}
        base = best["cp -r + sha256sum"]
        report = {
            "bytes": total, "shards": args.shards, "repeat": args.repeat, "write_seconds": round(write_time, 2),
            "seconds": {name: round(value, 3) for name, value in best.items()},
            "ratio_to_baseline": {name: round(value / base, 3) for name, value in best.items()},
            "throughput_gib_s": {name: round(total / value / 1024**3, 2) for name, value in best.items()},
        }
        for name, value in best.items():
            if name != "cp -r + sha256sum":
                record_comparison("package", f"{name} {total / 1024**3:.1f} GiB", value, "cp -r + sha256sum", base)
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(f"{total / 1024**3:.2f} GiB in {args.shards} shards, best of {args.repeat}")
            for name, value in best.items():
                print(f"  {name:<20} {value:7.2f} s  {report['throughput_gib_s'][name]:6.2f} GiB/s  "
                      f"x{report['ratio_to_baseline'][name]:.2f} of baseline")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
