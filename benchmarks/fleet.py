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

The demo models are generated before anything is timed. The machine's cores bound the
parallelism: on 2 shared cores the Ray run cannot be 2x faster than the sequential one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import record_comparison
from lmi_build.fleet.matrix import plan_matrix
from lmi_build.fleet.run import run_matrix
from lmi_build.sources.resolve import resolve_source
from tests.fixtures_ray import NODE_ARGS, PROFILE, fleet_env
from tests.fixtures_s3 import start_seaweedfs

MODELS = ("demo:tiny-llama", "demo:tiny-mistral")
LENGTHS = ("--max-input-len", "256", "--max-output-len", "128")
MATRIX = f"""
[defaults]
max_input_len = 256
max_output_len = 128

[[build]]
target = "hf"
[build.matrix]
model = {json.dumps(list(MODELS))}
dtype = ["fp16", "bf16"]

[[build]]
target = "trtllm"
model = "demo:tiny-llama"
profile = "{PROFILE}"
[build.matrix]
tp = [1, 2]
"""


def sequential_commands(cache: str, out: Path) -> list[list[str]]:
    commands = [["hf", "--model", model, "--dtype", dtype, *LENGTHS] for model in MODELS for dtype in ("fp16", "bf16")]
    commands += [["trtllm", "--model", "demo:tiny-llama", "--profile", PROFILE, "--tp", tp, *LENGTHS] for tp in "12"]
    return [[sys.executable, "-m", "lmi_build", *command, "--cache", cache, "--output", str(out / f"seq-{index}"),
             "--json"] for index, command in enumerate(commands)]


def timed_matrix(matrix: Path, **kwargs: Any) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    result = run_matrix(matrix, **kwargs).to_json()
    return time.perf_counter() - start, result


def main() -> None:
    from ray.cluster_utils import Cluster

    work = Path(tempfile.mkdtemp(prefix="lmi-fleet-bench-"))
    server = start_seaweedfs(work / "seaweedfs")
    os.environ.update(fleet_env(server, work / "lmi-build-cache"))
    os.environ.pop("RAY_ADDRESS", None)
    bucket = server.new_bucket("bench")
    for model in MODELS:  # generate the demo models once, before any timing
        resolve_source(model, purpose="build")
    matrix = work / "builds.toml"
    matrix.write_text(MATRIX, encoding="utf-8")

    start = time.perf_counter()
    for command in sequential_commands(f"s3://{bucket}/sequential-cache", work):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()[-400:]}")
    sequential = time.perf_counter() - start

    cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False})
    try:
        cluster.add_node(num_gpus=2, **NODE_ARGS)
        cluster.wait_for_nodes()
        cache = f"s3://{bucket}/fleet-cache"
        ray_seconds, first = timed_matrix(matrix, cache=cache, executor="ray", ray_address=cluster.address)
        rerun_seconds, rerun = timed_matrix(matrix, cache=cache, executor="ray", ray_address=cluster.address)

        hf_only = work / "hf.toml"
        hf_only.write_text(MATRIX.split("[[build]]\ntarget = \"trtllm\"")[0], encoding="utf-8")
        plan_start = time.perf_counter()
        plan_matrix(hf_only, cache=cache)
        planning = time.perf_counter() - plan_start
        serial_seconds, serial = timed_matrix(hf_only, cache=cache, executor="ray", ray_address=cluster.address,
                                              max_parallel=1)
    finally:
        cluster.shutdown()
        server.stop()

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
    record_comparison("fleet", "matrix --executor ray (6 builds)", ray_seconds, "6 sequential lmi-build", sequential)
    record_comparison("fleet", "matrix rerun (hf cached)", rerun_seconds, "6 sequential lmi-build", sequential)


if __name__ == "__main__":
    main()
