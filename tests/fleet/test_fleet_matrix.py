"""``lmi-build matrix`` on a real two-node Ray cluster (127.0.0.1) and a real SeaweedFS.

The hf builds are real (demo models, torch on CPU); the trtllm builds run the real ModelOpt
checkpoint export, then the STAND-IN trtllm-build on the node that declares GPUs: those results
are reported as stand_in, never cached, never published.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from lmi_build.core.errors import OptionError, PublishError
from lmi_build.fleet.executors import ray_task_options
from lmi_build.fleet.job import BuildResult, Started
from lmi_build.fleet.matrix import MatrixError, plan_matrix
from lmi_build.fleet.report import MatrixProgress
from lmi_build.fleet.run import run_matrix
from lmi_build.storage.remote import verify_remote
from lmi_build.targets import parse_plan_text
from tests.cli_process import run_lmi_build
from tests.fixtures_ray import PROFILE, RayCluster, fleet_cache, fleet_env
from tests.fixtures_s3 import S3Server
from tests.junit_reading import read_report

pytestmark = [pytest.mark.slow, pytest.mark.s3]

# 4 hf builds (2 models x 2 dtypes) and 2 stand-in engine builds (tp 1 and 2): 6 builds.
SIX_BUILDS = f"""
[defaults]
max_input_len = 256
max_output_len = 128

[[build]]
target = "hf"
publish = "s3://{{bucket}}/models/{{model}}/{{dtype}}/"
[build.matrix]
model = ["demo:tiny-llama", "demo:tiny-mistral"]
dtype = ["fp16", "bf16"]

[[build]]
target = "trtllm"
model = "demo:tiny-llama"
profile = "{PROFILE}"
[build.matrix]
tp = [1, 2]
"""
# One short stand-in engine build; each test adds its tp line or matrix.
ENGINE_BUILD = f"""
[[build]]
target = "trtllm"
model = "demo:tiny-llama"
profile = "{PROFILE}"
max_input_len = 64
max_output_len = 32
"""
# An hf build sent by node label to the node group of a profile's image (a CPU build could run anywhere).
LABELLED_BUILD = f"""
[[build]]
target = "hf"
model = "demo:tiny-llama"
dtype = "fp32"
node_labels = {{ "lmi-build/profile" = "{PROFILE}" }}
"""


def write_matrix(directory: Path, text: str, bucket: str) -> Path:
    path = directory / "builds.toml"
    path.write_text(text.replace("{bucket}", bucket), encoding="utf-8")
    return path


def statuses(results: dict[str, Any]) -> dict[str, str]:
    return {build["name"]: build["status"] for build in results["builds"]}


@pytest.fixture(scope="module")
def fleet_bucket(s3_server: S3Server) -> str:
    return s3_server.new_bucket("fleet")


def test_matrix_on_ray_then_rerun_is_cached(ray_cluster: RayCluster, fleet_bucket: str, tmp_path: Path) -> None:
    # One published hf build (the matrix's expansion over models and dtypes is tested without a
    # cluster below), an engine build that needs the GPU node (tp 2 there:
    # test_lost_worker_node_loses_nothing), and an hf build sent there by label: three Ray tasks a run.
    builds = (SIX_BUILDS.replace('"demo:tiny-llama", "demo:tiny-mistral"', '"demo:tiny-llama"')
              .replace('dtype = ["fp16", "bf16"]', 'dtype = ["fp16"]').replace("tp = [1, 2]", "tp = [1]"))
    matrix = write_matrix(tmp_path, builds + LABELLED_BUILD, fleet_bucket)
    cache = f"s3://{fleet_bucket}/lmi-build-cache"
    steps: set[tuple[str, str]] = set()  # (build, step) the live view showed, from the tasks' events

    def seen(progress: MatrixProgress) -> None:
        steps.update((name, step.name) for name, step in progress.steps.items())

    first = run_matrix(matrix, cache=cache, executor="ray", ray_address=ray_cluster.address,
                       on_update=seen).to_json()
    assert {("hf-tiny-llama-float16", "package"), ("trtllm-tiny-llama-tp1", "engine")} <= steps, steps
    assert statuses(first) == {
        "hf-tiny-llama-float16": "built", "trtllm-tiny-llama-tp1": "stand_in", "hf-tiny-llama": "built",
    }, first
    assert first["succeeded"] is False, "stand-in engines are not a successful build"
    gpu_node = str(ray_cluster.gpu_node.node_id)[:8]
    labelled = next(build for build in first["builds"] if build["name"] == "hf-tiny-llama")
    assert labelled["host"].endswith(gpu_node), "the node label decides where it runs"
    assert labelled["artifact_url"].startswith(f"s3://{fleet_bucket}/lmi-build-cache/")  # no publish: the entry
    for build in first["builds"]:
        if build["target"] == "trtllm":  # engine builds asked for GPUs: only the node that declares them could run them
            assert build["host"].endswith(gpu_node) and build["artifact_url"] is None
            assert "STAND-IN" in build["error"]
        elif build is not labelled:
            assert build["artifact_url"].startswith(f"s3://{fleet_bucket}/models/")
        if build["artifact_url"]:
            assert verify_remote(build["artifact_url"]) == []

    again = run_matrix(matrix, cache=cache, executor="ray", ray_address=ray_cluster.address).to_json()
    hf = {b["name"]: b for b in again["builds"] if b["target"] == "hf"}
    assert {b["status"] for b in hf.values()} == {"cached"}
    assert {b["artifact_url"] for b in hf.values()} == {b["artifact_url"] for b in first["builds"] if b["target"] == "hf"}
    # Stand-in engines are never cached: they are built again, and say so.
    assert [b["status"] for b in again["builds"] if b["target"] == "trtllm"] == ["stand_in"], \
        [b.get("error") for b in again["builds"]]


def test_lost_worker_node_loses_nothing(ray_cluster: RayCluster, fleet_bucket: str, tmp_path: Path) -> None:
    text = ENGINE_BUILD + """[build.matrix]
tp = [1, 2]
"""
    matrix = write_matrix(tmp_path, text, fleet_bucket)
    killed: list[str] = []

    def kill_on_first_start(event: Started) -> None:
        if not killed:  # both builds need GPUs: the first start is on the GPU node, mid-build
            killed.append(ray_cluster.replace_gpu_node())

    progress = run_matrix(matrix, cache=f"s3://{fleet_bucket}/kill-cache", executor="ray",
                          ray_address=ray_cluster.address, on_started=kill_on_first_start)
    results = progress.to_json()
    assert killed and statuses(results) == {"trtllm-tiny-llama-tp1": "stand_in", "trtllm-tiny-llama-tp2": "stand_in"}
    # Every build finished on the replacement node: what ran on the killed one was re-run there.
    assert all(not build["host"].endswith(killed[0][:8]) for build in results["builds"]), results
    assert max(build["attempts"] for build in results["builds"]) >= 2, "the killed build was started again"


def test_invalid_entry_fails_before_any_work(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    text = SIX_BUILDS + """
[[build]]
target = "trtllm"
model = "demo:tiny-llama"
tp = 3

[[build]]
target = "hf"
model = "demo:tiny-llama"
colour = "blue"

[[build]]
target = "hf"
model = "demo:tiny-llama"
dtype = "fp32"
publish = "s3://{bucket}/{modle}/"
"""
    matrix = write_matrix(tmp_path, text, s3_bucket)
    with pytest.raises(MatrixError) as raised:
        run_matrix(matrix, cache=f"s3://{s3_bucket}/cache", executor="ray", ray_address="127.0.0.1:1")
    problems = raised.value.problems
    assert {problem.split(":")[0] for problem in problems} == {"build[2]", "build[3]", "build[4]"}, problems
    assert any("colour" in p for p in problems) and any("modle" in p for p in problems)
    assert "Contents" not in s3_env.client().list_objects_v2(Bucket=s3_bucket), "nothing was written"


def test_a_missing_publish_bucket_fails_before_any_build(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    """Every distinct publish bucket is checked with a test write first, as a single build's
    --publish is: a matrix publishing to a bucket that does not exist built and cached first."""
    text = """
[[build]]
target = "hf"
model = "demo:tiny-llama"
dtype = "fp32"
name = "published"
publish = "s3://{bucket}/models/{model}/"

[[build]]
target = "hf"
model = "demo:tiny-llama"
dtype = "fp16"
name = "lost"
publish = "s3://no-such-bucket-{bucket}/models/{model}/"
"""
    matrix = write_matrix(tmp_path, text.replace("{bucket}", s3_bucket), s3_bucket)
    with pytest.raises(PublishError, match=f"bucket 'no-such-bucket-{s3_bucket}' does not exist"):
        run_matrix(matrix, cache=f"s3://{s3_bucket}/cache", executor="local")
    assert "Contents" not in s3_env.client().list_objects_v2(Bucket=s3_bucket), "nothing was built or cached"


def test_plan_resources_follow_the_plan(s3_env: S3Server, tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path, SIX_BUILDS, "any-bucket")
    jobs = {job.name: job for job in plan_matrix(matrix, cache=None)}
    assert set(jobs) == {"hf-tiny-llama-float16", "hf-tiny-llama-bfloat16", "hf-tiny-mistral-float16",
                         "hf-tiny-mistral-bfloat16", "trtllm-tiny-llama-tp1", "trtllm-tiny-llama-tp2"}
    assert jobs["trtllm-tiny-llama-tp2"].resources.num_gpus == 2
    assert jobs["trtllm-tiny-llama-tp1"].resources.num_gpus == 1
    assert jobs["hf-tiny-llama-float16"].resources.num_gpus == 0
    assert jobs["hf-tiny-llama-float16"].publish == "s3://any-bucket/models/tiny-llama/float16/"
    streamed = parse_plan_text(jobs["trtllm-tiny-llama-tp1"].saved_plan, "test").plan
    assert streamed.checkpoint_step is not None and streamed.memory is not None
    # The Ray memory request is the checkpoint step's estimate (streamed: the baseline and a few
    # tensors), not the general two-copies bound.
    assert jobs["trtllm-tiny-llama-tp1"].resources.memory_bytes == streamed.checkpoint_step.host_ram_bytes
    assert streamed.checkpoint_step.host_ram_bytes == streamed.memory.host_ram_bytes  # one figure for the step
    options = ray_task_options(jobs["trtllm-tiny-llama-tp2"], max_retries=3)
    assert options["num_gpus"] == 2 and options["max_retries"] == 3 and options["retry_exceptions"] is False
    assert "label_selector" not in options
    labelled = plan_matrix(write_matrix(tmp_path, LABELLED_BUILD, "any-bucket"), cache=None)[0]
    assert ray_task_options(labelled, max_retries=0)["label_selector"] == {"lmi-build/profile": PROFILE}


def test_cli_local_executor_json_and_exit_status(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
                                                 _session_cache: Path) -> None:
    text = """
[[build]]
target = "hf"
model = "demo:tiny-llama"
[build.matrix]
dtype = ["fp16", "bf16"]
"""
    matrix = write_matrix(tmp_path, text, s3_bucket)
    env = {**os.environ, **fleet_env(s3_env, fleet_cache(tmp_path / "local-cache", _session_cache))}

    def run(*extra: str, environ: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
        return run_lmi_build("matrix", str(matrix), "--cache", f"s3://{s3_bucket}/cache", "--json", *extra,
                             env=environ, timeout=600)

    first = run()
    assert first.returncode == 0, first.stderr
    assert set(statuses(json.loads(first.stdout)).values()) == {"built"}
    # The rerun as a GitHub Actions job reporting to JUnit: the same JSON on stdout, and both reports.
    summary, junit = tmp_path / "summary.md", tmp_path / "reports" / "matrix.xml"
    second = run("--junit-xml", str(junit), environ={**env, "GITHUB_ACTIONS": "true",
                                                     "GITHUB_STEP_SUMMARY": str(summary)})
    assert second.returncode == 0, second.stderr
    rerun = json.loads(second.stdout)
    assert set(statuses(rerun).values()) == {"cached"}
    assert all(b["artifact_url"].startswith(f"s3://{s3_bucket}/cache/") for b in rerun["builds"])
    report, cases = read_report(junit)
    assert (report.tests, report.failures) == (2, 0)
    urls = {build["name"]: build["artifact_url"] for build in rerun["builds"]}
    assert {case.name for case in cases} == set(urls)
    for case in cases:
        assert f"artifact: {urls[case.name]}" in case.system_out and "cache: hit" in case.system_out
        assert "size: " in case.system_out and case.classname == "lmi-build.matrix.hf"
    html = MarkdownIt("commonmark").enable("table").render(summary.read_text(encoding="utf-8"))
    assert all(f"<td><code>{url}</code></td>" in html for url in urls.values())
    assert html.count("<td>hit</td>") == 2 and '<code class="language-mermaid">gantt' in html


def test_build_failure_is_reported_not_retried(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, _session_cache: Path) -> None:
    matrix = write_matrix(tmp_path, ENGINE_BUILD, s3_bucket)
    cache = fleet_cache(tmp_path / "cache", _session_cache)
    for key, value in {**fleet_env(s3_env, cache), "STANDIN_MODE": "fail"}.items():
        monkeypatch.setenv(key, value)  # the spawned pool processes inherit it
    results: list[BuildResult] = []
    progress = run_matrix(matrix, cache=f"s3://{s3_bucket}/cache", on_result=results.append)
    assert [r.status for r in results] == ["failed"] and results[0].error
    assert progress.starts["trtllm-tiny-llama"] == 1 and not progress.succeeded
    # The failed step's log outlives the work directory, and the error names where it is.
    assert results[0].log is not None and Path(results[0].log).is_file()
    assert f"full log: {results[0].log} on {results[0].host}" in results[0].error


def test_a_build_no_node_can_take_fails_at_once(ray_cluster: RayCluster, fleet_bucket: str, tmp_path: Path) -> None:
    """Ray queues a task no node can ever run ("infeasible") forever: it used to hang the matrix."""
    matrix = write_matrix(tmp_path, """
[[build]]
target = "hf"
model = "demo:tiny-llama"
dtype = "fp32"
node_labels = { "lmi-build/profile" = "no-such-node-group" }
""", fleet_bucket)
    # A matrix without --cache (this host's local cache) is refused on a cluster of more than one node.
    with pytest.raises(OptionError, match="cluster of 2 nodes needs a shared build cache"):
        run_matrix(matrix, cache=None, local_cache=True, executor="ray", ray_address=ray_cluster.address)
    started = time.monotonic()
    result = run_matrix(matrix, cache=None, executor="ray", ray_address=ray_cluster.address).to_json()
    assert time.monotonic() - started < 60
    (build,) = result["builds"]
    assert build["status"] == "failed" and "none of the cluster's" in build["error"], build
    assert "--wait-for-resources" in build["error"] and "no-such-node-group" in build["error"]

    waited = time.monotonic()
    result = run_matrix(matrix, cache=None, executor="ray", ray_address=ray_cluster.address,
                        wait_for_resources=3).to_json()
    assert 3 <= time.monotonic() - waited < 60
    assert result["builds"][0]["status"] == "failed" and "within --wait-for-resources" in result["builds"][0]["error"]


# What Ray itself writes when its driver is signalled or connects (absl's failure handler in the C++
# core worker, raylet/GCS log lines, its banners): none of it may reach the console.
RAY_NOISE = re.compile(r"\*\*\* SIGTERM|PC: @|@ +0x[0-9a-f]|core_worker|raylet|gcs_|Ray runtime|ray\.init|"
                       r"Connecting to existing Ray|Started a local Ray|\[\d{4}-\d\d-\d\d \d\d:", re.IGNORECASE)


def test_sigterm_while_waiting_on_ray_prints_only_lmi_builds_lines(ray_cluster: RayCluster, fleet_bucket: str,
                                                                   tmp_path: Path) -> None:
    """Issue 23 item 11: SIGTERM (a CI cancel) while a matrix waits on Ray: lmi-build says what it
    waited for and that it was terminated, exits 143, and nothing of Ray's reaches the console.
    Before: Ray's own handler (``ray.init`` installs ``sys.exit(15)``) ended it with status 1, and its
    C++ core's "*** SIGTERM received ... PC: @ 0x..." dump reached the terminal."""
    # 4 GPUs: the GPU node declares 2, so the build waits for resources.
    matrix = write_matrix(tmp_path, ENGINE_BUILD + "tp = 4\n", fleet_bucket)
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:
        driver = subprocess.Popen([sys.executable, "-m", "lmi_build", "matrix", str(matrix), "--cache",
                                   f"s3://{fleet_bucket}/sigterm-cache", "--executor", "ray", "--ray-address", ray_cluster.address,
                                   "--wait-for-resources", "600"],
                                  stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            deadline = time.monotonic() + 120
            while "waiting up to 600 s" not in stderr_path.read_text() and time.monotonic() < deadline:
                assert driver.poll() is None, stderr_path.read_text()
                time.sleep(0.2)
            assert "waiting up to 600 s" in stderr_path.read_text(), "the driver never reached Ray's wait"
            driver.send_signal(signal.SIGTERM)
            stdout, _ = driver.communicate(timeout=60)
        finally:
            if driver.poll() is None:
                driver.kill()
    console = stdout + stderr_path.read_text()
    assert driver.returncode == 143, console
    lines = [line for line in console.splitlines() if line.strip()]
    assert not [line for line in lines if RAY_NOISE.search(line)], console
    # lmi-build's own lines only: the wait it announced and the one-line failure.
    assert "needs 4 GPU(s)" in lines[0] and "the cluster's 2 node(s)" in lines[0], console
    assert "waiting up to 600 s" in lines[0], console
    assert lines[-1].startswith("error: terminated (SIGTERM)"), console
    assert len(lines) <= 3, console


def test_infeasible_reason_reads_every_resource() -> None:
    from lmi_build.fleet.executors import infeasible_reason

    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0, "memory": 2.0**34}, "Labels": {"g": "a"}},
             {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 8.0}}]
    assert infeasible_reason(nodes, {"num_cpus": 1, "num_gpus": 2}) is None
    assert "4 GPU(s)" in str(infeasible_reason(nodes, {"num_cpus": 1, "num_gpus": 4}))  # the 8-GPU node is dead
    assert infeasible_reason(nodes, {"num_cpus": 1, "num_gpus": 0, "label_selector": {"g": "a"}}) is None
    assert infeasible_reason(nodes, {"num_cpus": 1, "num_gpus": 0, "resources": {"neuron_cores": 2}}) is not None
