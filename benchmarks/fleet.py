"""Fleet benchmark: the 6-build matrix of tests/fleet/test_fleet_matrix.py (4 hf builds of two demo
models x two dtypes, 2 trtllm builds tp 1 and 2 whose engines come from the STAND-IN trtllm-build)
against a local SeaweedFS:

1. sequential: one ``lmi-build hf|trtllm ... --cache s3://...`` process per build, one after another;
2. ``lmi-build matrix --executor ray`` (in process) on a two-node Ray cluster on 127.0.0.1
   (``ray.cluster_utils.Cluster``: a 2-CPU head, and a 2-CPU node that declares 2 GPUs);
3. the rerun of the same matrix: every hf build a verified cache hit (stand-in engines are never
   cached, so the two trtllm builds are built again: reported separately);
4. per-build scheduling overhead: the rerun of the 4 hf builds with ``--max-parallel 1``, wall time
   minus planning minus the time spent inside the tasks, divided by 4.

    python benchmarks/fleet.py
    python benchmarks/fleet.py --models demo:tiny-llama --dtypes fp16 --tps 1    # 2 builds: a smoke run

The demo models are generated (or copied from this host's lmi-build cache) before anything is
timed. The machine's cores bound the parallelism: on 2 shared cores the Ray run cannot be 2x faster
than the sequential one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import record_comparison
from lmi_build.core.paths import cache_root
from lmi_build.fleet.matrix import plan_matrix
from lmi_build.fleet.run import run_matrix
from lmi_build.sources.resolve import resolve_source
from tests.fixtures_ray import NODE_ARGS, PROFILE, fleet_cache, fleet_env
from tests.fixtures_s3 import start_seaweedfs

LENGTHS = ("--max-input-len", "256", "--max-output-len", "128")


def matrix_text(models: list[str], dtypes: list[str], tps: list[str]) -> str:
    """hf builds of every model x dtype, then trtllm builds of the first model at every tp."""
    return f"""
[defaults]
max_input_len = 256
max_output_len = 128

[[build]]
target = "hf"
[build.matrix]
model = {json.dumps(models)}
dtype = {json.dumps(dtypes)}

[[build]]
target = "trtllm"
model = "{models[0]}"
profile = "{PROFILE}"
[build.matrix]
tp = [{", ".join(tps)}]
"""


def sequential_commands(models: list[str], dtypes: list[str], tps: list[str], cache: str,
                        out: Path) -> list[list[str]]:
    commands = [["hf", "--model", model, "--dtype", dtype, *LENGTHS] for model in models for dtype in dtypes]
    commands += [["trtllm", "--model", models[0], "--profile", PROFILE, "--tp", tp, *LENGTHS] for tp in tps]
    return [[sys.executable, "-m", "lmi_build", *command, "--cache", cache, "--output", str(out / f"seq-{index}"),
             "--json"] for index, command in enumerate(commands)]


def timed_matrix(matrix: Path, **kwargs: Any) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    result = run_matrix(matrix, **kwargs).to_json()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="demo:tiny-llama,demo:tiny-mistral", help="the hf builds' models")
    parser.add_argument("--dtypes", default="fp16,bf16", help="the hf builds' dtypes")
    parser.add_argument("--tps", default="1,2", help="the trtllm builds' tp (of the first model)")
    args = parser.parse_args()
    models, dtypes, tps = args.models.split(","), args.dtypes.split(","), args.tps.split(",")
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="lmi-fleet-bench-"))
    server = start_seaweedfs(work / "seaweedfs")
    cluster: Cluster | None = None
    try:
        # The demo models this host already generated (LMI_BUILD_CACHE) are copied, not generated again.
        os.environ.update(fleet_env(server, fleet_cache(work / "lmi-build-cache", cache_root())))
        os.environ.pop("RAY_ADDRESS", None)
        bucket = server.new_bucket("bench")
        for model in models:  # generate the demo models once, before any timing
            resolve_source(model, purpose="build")
        matrix = work / "builds.toml"
        matrix.write_text(matrix_text(models, dtypes, tps), encoding="utf-8")

        start = time.perf_counter()
        for command in sequential_commands(models, dtypes, tps, f"s3://{bucket}/sequential-cache", work):
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()[-400:]}")
        sequential = time.perf_counter() - start

        cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
        cluster.add_node(num_gpus=2, **NODE_ARGS)
        cluster.wait_for_nodes()
        cache = f"s3://{bucket}/fleet-cache"
        ray_seconds, first = timed_matrix(matrix, cache=cache, executor="ray", ray_address=cluster.address)
        rerun_seconds, rerun = timed_matrix(matrix, cache=cache, executor="ray", ray_address=cluster.address)

        hf_only = work / "hf.toml"
        hf_only.write_text(matrix_text(models, dtypes, tps).split("[[build]]\ntarget = \"trtllm\"")[0],
                           encoding="utf-8")
        plan_start = time.perf_counter()
        plan_matrix(hf_only, cache=cache)
        planning = time.perf_counter() - plan_start
        serial_seconds, serial = timed_matrix(hf_only, cache=cache, executor="ray", ray_address=cluster.address,
                                              max_parallel=1)
    finally:
        if cluster is not None:
            cluster.shutdown()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    in_tasks = sum(build["seconds"] for build in serial["builds"])
    overhead = (serial_seconds - planning - in_tasks) / len(serial["builds"])
    cached = [b for b in rerun["builds"] if b["status"] == "cached"]
    results = {
        "builds": len(first["builds"]),
        "first_run_statuses": first["counts"],
        "rerun_statuses": rerun["counts"],
        "sequential_seconds": round(sequential, 2),
        "ray_seconds": round(ray_seconds, 2),
        "ray_over_sequential": round(ray_seconds / sequential, 3),
        "rerun_seconds": round(rerun_seconds, 2),
        "rerun_over_sequential": round(rerun_seconds / sequential, 3),
        "rerun_cached_build_seconds_mean": round(sum(b["seconds"] for b in cached) / max(1, len(cached)), 3),
        "scheduling_overhead_per_build_seconds": round(overhead, 3),
        "scheduling_measure": f"{len(serial['builds'])} cached hf builds, --max-parallel 1: "
                              f"{serial_seconds:.2f} s wall - {planning:.2f} s planning - {in_tasks:.2f} s in tasks",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(results, indent=2))
    builds = len(first["builds"])
    record_comparison("fleet", f"matrix --executor ray ({builds} builds)", ray_seconds,
                      f"{builds} sequential lmi-build", sequential)
    record_comparison("fleet", "matrix rerun (hf cached)", rerun_seconds, f"{builds} sequential lmi-build", sequential)


if __name__ == "__main__":
    main()
