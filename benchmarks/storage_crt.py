"""Why ``pull`` downloads with botocore and not the AWS CRT: lmi-build's download (every byte
SHA-256 verified against the manifest) vs ``s5cmd cp`` vs awscrt's S3 client, against the same
local SeaweedFS, alternating ``--repeat`` times (medians; the machine may be shared).

    python benchmarks/storage_crt.py --size-gb 1 --repeat 3

awscrt is measured two ways: writing straight to the file (``recv_filepath``, its fastest path,
nothing verified) and the same plus a SHA-256 pass over each file as soon as it is complete, which
is what pull would need. Each run also reports the client's CPU seconds (user+system): with the
server on the same cores, the transfer is CPU bound and CPU seconds are the steadier figure.
Measured 2026-11-23 on the 2-core development host (shared, load 8-12): the CRT without any
verification needed as much client CPU as pull with it, or more (1.87 vs 1.90 CPU-s per GiB in
one run, 3.11 vs 2.13 in another; s5cmd 1.66 and 1.54), so it cannot close the gap to s5cmd.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import record_comparison, write_random
from benchmarks.storage import timed_cpu
from lmi_build.reporting.output import Mode, Output
from lmi_build.storage.client import s3_client
from lmi_build.storage.transfer import Download, download_all
from tests.fixtures_s3 import S3Server, start_seaweedfs


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(1024 * 1024)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


class CrtDownloader:
    """awscrt's S3 client, as s3transfer's CRT manager drives it: one GET_OBJECT meta request per
    object, split into ranged parts and written to the file by the CRT's own threads."""

    def __init__(self, server: S3Server, part_size: int) -> None:
        from awscrt import auth, io, s3

        self.s3 = s3
        credentials = auth.AwsCredentialsProvider.new_static(server.access_key, server.secret_key)
        self.host = server.endpoint.split("://", 1)[1]
        self.client = s3.S3Client(
            bootstrap=io.ClientBootstrap(io.EventLoopGroup(), io.DefaultHostResolver(io.EventLoopGroup(1))),
            region="us-east-1", tls_mode=s3.S3RequestTlsMode.DISABLED, part_size=part_size,
            signing_config=s3.create_default_s3_signing_config(region="us-east-1", credential_provider=credentials))

    def download(self, bucket: str, keys: dict[str, Path], expected: dict[str, str] | None) -> None:
        """GET every key into its path; with ``expected``, hash each file once it is complete (two
        threads) and fail on a mismatch."""
        from awscrt.http import HttpHeaders, HttpRequest

        errors: list[BaseException] = []
        hashes: list[tuple[Future[str], str]] = []
        finished: list[threading.Event] = []
        with ThreadPoolExecutor(max_workers=2) as hashers:
            for key, path in keys.items():
                done = threading.Event()
                finished.append(done)

                def on_done(error: BaseException | None = None, key: str = key, path: Path = path,
                            done: threading.Event = done, **_: Any) -> None:
                    if error is not None:
                        errors.append(error)
                    elif expected is not None:
                        hashes.append((hashers.submit(sha256_file, path), expected[key]))
                    done.set()

                request = HttpRequest("GET", f"/{bucket}/{key}", HttpHeaders([("Host", self.host)]))
                self.client.make_request(type=self.s3.S3RequestType.GET_OBJECT, request=request,
                                         recv_filepath=str(path), on_done=on_done)
            for done in finished:
                done.wait()
            if errors:
                raise RuntimeError(f"CRT download failed: {errors[0]!r}")
            for future, want in hashes:
                if future.result() != want:
                    raise RuntimeError("CRT download does not match its SHA-256")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--part-mb", type=int, default=8, help="the CRT's part size (its default for 10 Gbps)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        import awscrt  # noqa: F401 - only to say how to get it
    except ImportError:
        sys.exit("needs awscrt: pip install awscrt (or the dev extra)")

    work = Path(tempfile.mkdtemp(prefix="lmi-crt-bench-"))
    server = start_seaweedfs(work / "weed")
    try:
        os.environ.update(server.env())
        env = {**os.environ, **server.env()}
        bucket = server.new_bucket("crt")
        source = work / "source"
        source.mkdir()
        size = int(args.size_gb * 1024**3 / args.shards)
        names = [f"shard-{index}.bin" for index in range(args.shards)]
        for name in names:
            write_random(source / name, size)
        digests = {f"d/{name}": sha256_file(source / name) for name in names}
        s5 = shutil.which("s5cmd", path=str(Path(sys.executable).parent)) or shutil.which("s5cmd") or "s5cmd"
        s5_args = [s5, "--endpoint-url", server.endpoint, "--numworkers", str(args.workers)]
        subprocess.run([*s5_args, "cp", f"{source}/*", f"s3://{bucket}/d/"], check=True, env=env, capture_output=True)
        shutil.rmtree(source)

        client = s3_client(None, workers=args.workers)
        crt = CrtDownloader(server, args.part_mb * 1024 * 1024)
        quiet = Output(mode=Mode.QUIET)

        def targets(into: Path) -> dict[str, Path]:
            into.mkdir(parents=True, exist_ok=True)
            return {key: into / key.split("/", 1)[1] for key in digests}

        runs: dict[str, Callable[[Path], Any]] = {
            "pull (SHA-256 verified)": lambda into: download_all(
                client, bucket, [Download(key, path, size, digests[key]) for key, path in targets(into).items()],
                workers=args.workers, output=quiet),
            "s5cmd cp": lambda into: subprocess.run(
                [*s5_args, "cp", f"s3://{bucket}/d/*", f"{into}/"], check=True, env=env, capture_output=True),
            "awscrt (not verified)": lambda into: crt.download(bucket, targets(into), None),
            "awscrt + SHA-256 pass": lambda into: crt.download(bucket, targets(into), digests),
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for _ in range(max(1, args.repeat)):
            for name, run in runs.items():
                into = work / "out"
                samples[name].append(timed_cpu(lambda run=run, into=into: run(into)))
                shutil.rmtree(into)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    wall = {name: statistics.median(w for w, _ in runs_) for name, runs_ in samples.items()}
    cpu = {name: statistics.median(c for _, c in runs_) for name, runs_ in samples.items()}
    print(f"{args.size_gb:g} GiB in {args.shards} objects, medians of {args.repeat} alternating runs")
    print(f"{'download':26s} {'wall':>8s} {'client CPU':>11s} {'vs s5cmd':>9s}")
    for name in samples:
        runs_text = "/".join(f"{w:.2f}" for w, _ in samples[name])
        print(f"{name:26s} {wall[name]:7.2f}s {cpu[name]:10.2f}s {wall[name] / wall['s5cmd cp']:8.2f}x  ({runs_text})")
    size_text = f"{args.size_gb:g} GiB"
    for name in ("awscrt (not verified)", "awscrt + SHA-256 pass"):
        record_comparison("storage_crt", f"{name} {size_text}: client CPU", cpu[name],
                          "s5cmd cp (download): client CPU", cpu["s5cmd cp"])
    record_comparison("storage_crt", f"pull {size_text}: client CPU", cpu["pull (SHA-256 verified)"],
                      "s5cmd cp (download): client CPU", cpu["s5cmd cp"])


if __name__ == "__main__":
    main()
