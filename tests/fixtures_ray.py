"""A real two-node Ray cluster on 127.0.0.1 (``ray.cluster_utils.Cluster``) for the fleet tests.

The head node offers CPUs only; the second node declares GPUs it does not have, so engine builds
(which request GPUs) are scheduled onto it, where the STAND-IN trtllm-build and nvidia-smi are first
on PATH. Ray nodes inherit this process's environment when they start: the S3 server's endpoint
and credentials, the stand-ins and the lmi-build cache are set before the nodes are added.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_lmi_build
from tests.fixtures_s3 import S3Server
from tests.paths import STANDINS_DIR

STANDINS = STANDINS_DIR
PROFILE = "lmi-0.33.0-trtllm-0.21.0"
OBJECT_STORE_BYTES = 80 * 1024**2  # the builds pass only small JSON through Ray
# Two builds at a time on each node. A Ray build's worker exits when its build ends and skips the
# collection at exit (lmi_build.fleet.executors._ray_job): before, finished workers stayed idle
# holding torch, transformers and ModelOpt (~0.5 GiB each) and the Ray processes peaked at 4.3 GiB
# beside the suite's other workers (two fleet tests were killed by Ray's out-of-memory monitor on a
# host with 8 GiB free); now the peak is the four running builds, ~3.8 GiB (README).
NODE_ARGS: dict[str, Any] = {"num_cpus": 2, "object_store_memory": OBJECT_STORE_BYTES}
# How soon the head declares a killed node dead and re-runs its tasks: a health check each second,
# dead after 3 failed ones (Ray 2.60's defaults, a check each 3 s and dead after 5, kept the lost-node
# test waiting ~14 s). A check fails only when the node does not answer within
# health_check_timeout_ms, left at Ray's default: a busy node is not declared dead. The names and
# defaults are RayConfig's (src/ray/common/ray_config_def.h).
LOST_NODE_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
# The GPU node says which LMI image (profile) it runs, as a real node group would (docs/FLEETS.md).
GPU_LABELS = {"lmi-build/profile": PROFILE}


def standin_trtllm_version(profile: str = PROFILE) -> str:
    shown = run_lmi_build("profiles", "show", profile, "--json")
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["tensorrt_llm"])


def fleet_env(s3: S3Server, cache_dir: Path) -> dict[str, str]:
    """What every Ray node (and the local pool) needs: S3, the stand-ins, one lmi-build cache."""
    return {**s3.env(), "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_TRTLLM_VERSION": standin_trtllm_version(), "LMI_BUILD_CACHE": str(cache_dir)}


def fleet_cache(directory: Path, demo_models_from: Path) -> Path:
    """A new lmi-build cache for the builds' processes, holding the demo models of the cache
    ``demo_models_from``: each build process otherwise generated demo:tiny-llama again (torch's
    import and a tokenizer's training, ~5 s of CPU), several at once on the cluster. Generation has
    its own tests (tests/sources/test_sources_demo.py; the concurrent publish, tests/test_fs.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (demo_models_from / "demo").is_dir():
        shutil.copytree(demo_models_from / "demo", directory / "demo")
    return directory


@dataclass
class RayCluster:
    cluster: Any  # ray.cluster_utils.Cluster
    gpu_node: Any

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def replace_gpu_node(self) -> str:
        """Kill the GPU node (no graceful shutdown: as a lost host) and add a fresh one; returns the
        killed node's id."""
        killed = str(self.gpu_node.node_id)
        self.cluster.remove_node(self.gpu_node, allow_graceful=False)
        self.gpu_node = self.cluster.add_node(num_gpus=2, labels=GPU_LABELS, **NODE_ARGS)
        return killed


@pytest.fixture(scope="module")
def ray_cluster(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory,
                _session_cache: Path) -> Iterator[RayCluster]:
    pytest.importorskip("ray", reason="the fleet extra is not installed: pip install -e '.[fleet]'")
    from ray.cluster_utils import Cluster

    env = fleet_env(s3_server, fleet_cache(tmp_path_factory.mktemp("fleet-lmi-build-cache"), _session_cache))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "RAY_ADDRESS"):
            patch.delenv(key, raising=False)
        cluster = Cluster(initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False,
                                                                "_system_config": LOST_NODE_CHECKS})
        try:
            gpu_node = cluster.add_node(num_gpus=2, labels=GPU_LABELS, **NODE_ARGS)
            cluster.wait_for_nodes()
            yield RayCluster(cluster=cluster, gpu_node=gpu_node)
        finally:
            cluster.shutdown()
