"""Storage benchmark: lmi-build publish/pull vs ``s5cmd cp`` against the same local SeaweedFS,
re-publish of an unchanged artifact, and the local-directory digest (first and cached run) vs
``sha256sum``.

    python benchmarks/storage.py --size-gb 2 --workers 8 --repeat 3

Pull and ``s5cmd cp`` downloads run alternately ``--repeat`` times and the medians are compared:
the machine may be shared, and whichever runs first right after the uploads pays for the
writeback they left behind. Each download also reports the client's CPU seconds (user+system):
on a machine where the server shares the cores, pull needs s5cmd's CPU plus SHA-256 of every byte.

Disk use: about 3x the artifact size at peak (artifact, server copy, one pulled copy); every
directory is removed at the end. Page cache is warm for every measurement (nothing here can
drop it), so the numbers compare the tools, not the disk.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import record_comparison, write_safetensors
from lmi_build.reporting.output import Mode, Output
from lmi_build.sources.resolve import resolve_source
from lmi_build.storage.publish import publish
from lmi_build.storage.pull import pull
from tests.fixtures_s3 import make_artifact, start_seaweedfs


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def cpu_seconds() -> float:
    """User+system CPU of this process and its finished children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, client CPU seconds) of one call."""
    cpu = cpu_seconds()
    wall, _ = timed(fn)
    return wall, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="alternate pull and s5cmd download this many times")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="lmi-storage-bench-"))
    os.environ["LMI_BUILD_CACHE"] = str(work / "cache")
    quiet = Output(mode=Mode.QUIET)
    server = start_seaweedfs(work / "weed")
    results: dict[str, Any] = {"size_gb": args.size_gb, "shards": args.shards, "workers": args.workers}
    try:
        env = {**os.environ, **server.env()}
        os.environ.update(server.env())
        bucket = server.new_bucket("bench")
        artifact = work / "artifact"
        artifact.mkdir()
        shard_size = int(args.size_gb * 1024**3 / args.shards)
        for index in range(args.shards):
            write_safetensors(artifact / f"model-{index:05d}-of-{args.shards:05d}.safetensors", shard_size)
        small = {"config.json": b'{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}',
                 "tokenizer.json": os.urandom(2 * 1024 * 1024), "tokenizer_config.json": b"{}",
                 "generation_config.json": b"{}", "serving.properties": b"engine=Python\n"}
        seconds, _ = timed(lambda: make_artifact(artifact, small))
        results["manifest_seconds"] = round(seconds, 2)
        total = sum(p.stat().st_size for p in artifact.rglob("*") if p.is_file())
        results["bytes"] = total

        # Local digest: first run hashes, second reads stat only; sha256sum for reference.
        files = sorted(str(p) for p in artifact.iterdir() if p.is_file())
        results["sha256sum_seconds"] = round(timed(lambda: subprocess.run(
            ["sha256sum", *files], check=True, capture_output=True))[0], 2)
        results["digest_first_seconds"] = round(timed(lambda: resolve_source(str(artifact), purpose="build"))[0], 2)
        results["digest_second_seconds"] = round(timed(lambda: resolve_source(str(artifact), purpose="build"))[0], 3)

        url = f"s3://{bucket}/lmi"
        seconds, summary = timed(lambda: publish(artifact, url, workers=args.workers, output=quiet))
        results["publish_seconds"] = round(seconds, 2)
        results["publish_objects"] = summary.objects
        s5 = shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or shutil.which("s5cmd") or "s5cmd"
        s5_args = [s5, "--endpoint-url", server.endpoint, "--numworkers", str(args.workers)]
        results["s5cmd_upload_seconds"] = round(timed(lambda: subprocess.run(
            [*s5_args, "cp", f"{artifact}/*", f"s3://{bucket}/s5/"], check=True, env=env, capture_output=True))[0], 2)
        seconds, summary = timed(lambda: publish(artifact, url, workers=args.workers, output=quiet))
        results["republish_seconds"] = round(seconds, 2)
        results["republish_skipped"] = summary.skipped

        pulled, s5_dir = work / "pulled", work / "s5-pulled"
        pulls: list[tuple[float, float]] = []
        s5_downloads: list[tuple[float, float]] = []
        for _ in range(max(1, args.repeat)):
            pulls.append(timed_cpu(lambda: pull(url, pulled, workers=args.workers, output=quiet)))
            shutil.rmtree(pulled)
            s5_downloads.append(timed_cpu(lambda: subprocess.run(
                [*s5_args, "cp", f"s3://{bucket}/s5/*", f"{s5_dir}/"], check=True, env=env, capture_output=True)))
            shutil.rmtree(s5_dir)
        results["pull_runs_seconds"] = [round(wall, 2) for wall, _ in pulls]
        results["s5cmd_download_runs_seconds"] = [round(wall, 2) for wall, _ in s5_downloads]
        results["pull_seconds"] = round(statistics.median(wall for wall, _ in pulls), 2)
        results["s5cmd_download_seconds"] = round(statistics.median(wall for wall, _ in s5_downloads), 2)
        results["pull_cpu_seconds"] = round(statistics.median(cpu for _, cpu in pulls), 2)
        results["s5cmd_download_cpu_seconds"] = round(statistics.median(cpu for _, cpu in s5_downloads), 2)

        results["publish_vs_s5cmd"] = round(results["publish_seconds"] / results["s5cmd_upload_seconds"], 2)
        results["pull_vs_s5cmd"] = round(results["pull_seconds"] / results["s5cmd_download_seconds"], 2)
        results["digest_first_vs_sha256sum"] = round(results["digest_first_seconds"] / results["sha256sum_seconds"], 2)
        gib = total / 1024**3
        results["publish_GiB_per_s"] = round(gib / results["publish_seconds"], 2)
        results["pull_GiB_per_s"] = round(gib / results["pull_seconds"], 2)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))
    size = f"{results['bytes'] / 1024**3:.1f} GiB"
    record_comparison("storage", f"publish {size}", results["publish_seconds"], "s5cmd cp (upload)",
                      results["s5cmd_upload_seconds"])
    runs = f"median of {len(results['pull_runs_seconds'])}"
    record_comparison("storage", f"pull {size} (SHA-256 verified, {runs})", results["pull_seconds"],
                      "s5cmd cp (download)", results["s5cmd_download_seconds"])
    record_comparison("storage", f"pull {size}: client CPU", results["pull_cpu_seconds"],
                      "s5cmd cp (download): client CPU", results["s5cmd_download_cpu_seconds"])
    record_comparison("storage", f"local digest {size}", results["digest_first_seconds"], "sha256sum",
                      results["sha256sum_seconds"])


if __name__ == "__main__":
    main()
