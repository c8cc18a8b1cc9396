"""Parallel uploads and downloads through s3transfer (boto3's transfer manager), with progress.

One transfer manager runs all files of a publish/pull, so small files and the parts of big ones
share the same ``workers`` threads. On any failure (or Ctrl-C) the manager cancels what is in
flight; s3transfer writes downloads to a temporary name and renames them only when complete,
so an interrupted file never looks finished.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from lmi_build.errors import PublishError
from lmi_build.output import Output

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# Parts of 32 MiB: big enough that per-request overhead is small, small enough that a 2 GB
# shard is split over all workers. Objects at or below the threshold go up in one PUT, which lets
# the server check the whole-object SHA-256 we send against the manifest.
PART_SIZE = 32 * 1024 * 1024
BANDWIDTH_ENV = "LMI_BUILD_S3_MAX_BANDWIDTH"
SHA256_META = "sha256"  # stored as x-amz-meta-sha256: the whole-object hash, whatever the part size


class TransferSummary(BaseModel):
    bytes: int  # bytes actually transferred (skipped objects not counted)
    objects: int  # objects transferred
    skipped: int  # objects already in place with the right size and checksum
    seconds: float


@dataclass(frozen=True)
class Upload:
    path: Path
    key: str
    size: int
    sha256: str  # hex
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Download:
    key: str
    path: Path
    size: int


def b64_sha256(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def max_bandwidth() -> int | None:
    """``LMI_BUILD_S3_MAX_BANDWIDTH`` (bytes/s): cap transfers on a shared link (None = no cap)."""
    value = os.environ.get(BANDWIDTH_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) <= 0:
        raise PublishError(f"{BANDWIDTH_ENV}={value!r} is not a positive number of bytes per second",
                           hint=f"set it like {BANDWIDTH_ENV}=50000000, or unset it")
    return int(value)


def transfer_config(workers: int) -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=PART_SIZE,
        multipart_chunksize=PART_SIZE,
        max_concurrency=max(1, workers),
        use_threads=True,
        io_chunksize=1024 * 1024,  # 4x the default: ~9% faster downloads here, <=100 MiB buffered
        max_bandwidth=max_bandwidth(),
    )


def _subscriber(progress: Progress | None, task: TaskID | None) -> list[Any]:
    if progress is None or task is None:
        return []
    from s3transfer.subscribers import BaseSubscriber

    bar, task_id = progress, task

    class _Advance(BaseSubscriber):
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            # Negative on a retried part: rich's advance() moves back, which is what we want.
            bar.advance(task_id, bytes_transferred)

    return [_Advance()]


@contextmanager
def _progress_task(output: Output, label: str, total: int) -> Iterator[tuple[Progress | None, TaskID | None]]:
    with output.progress() as progress:
        task = progress.add_task(label, total=total) if progress is not None else None
        yield progress, task


def upload_all(client: Any, bucket: str, uploads: Sequence[Upload], *, workers: int, output: Output,
               label: str = "upload") -> None:
    """Upload every item; the first failure cancels the rest and is raised."""
    if not uploads:
        return
    from boto3.s3.transfer import create_transfer_manager

    total = sum(u.size for u in uploads)
    with _progress_task(output, label, total) as (progress, task):
        subscribers = _subscriber(progress, task)
        with create_transfer_manager(client, transfer_config(workers)) as manager:
            futures = []
            for item in uploads:
                extra = {"Metadata": {SHA256_META: item.sha256}, **item.extra}
                if item.size <= PART_SIZE:
                    extra["ChecksumSHA256"] = b64_sha256(item.sha256)  # server verifies the manifest hash
                else:
                    extra["ChecksumAlgorithm"] = "SHA256"  # server verifies each part
                futures.append(
                    manager.upload(str(item.path), bucket, item.key, extra_args=extra, subscribers=subscribers)
                )
            for future in futures:
                future.result()


def download_all(client: Any, bucket: str, downloads: Sequence[Download], *, workers: int, output: Output,
                 extra: dict[str, Any] | None = None, label: str = "download") -> None:
    if not downloads:
        return
    from boto3.s3.transfer import create_transfer_manager

    total = sum(d.size for d in downloads)
    with _progress_task(output, label, total) as (progress, task):
        subscribers = _subscriber(progress, task)
        with create_transfer_manager(client, transfer_config(workers)) as manager:
            futures = []
            for item in downloads:
                item.path.parent.mkdir(parents=True, exist_ok=True)
                futures.append(
                    manager.download(bucket, item.key, str(item.path), extra_args=dict(extra or {}),
                                     subscribers=subscribers)
                )
            for future in futures:
                future.result()


def head_many(client: Any, bucket: str, keys: Sequence[str], *, workers: int,
              extra: dict[str, Any] | None = None) -> dict[str, dict[str, Any] | None]:
    """HEAD many keys in parallel: key -> response, or None when the object does not exist."""
    from botocore.exceptions import ClientError

    def head(key: str) -> dict[str, Any] | None:
        try:
            response: dict[str, Any] = client.head_object(Bucket=bucket, Key=key, **(extra or {}))
            return response
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    if not keys:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        return dict(zip(keys, pool.map(head, keys), strict=True))


def list_sizes(client: Any, bucket: str, prefix: str, *, extra: dict[str, Any] | None = None) -> dict[str, int]:
    """Every key under ``prefix`` with its size (paginated)."""
    sizes: dict[str, int] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, **(extra or {})):
        for item in page.get("Contents", []):
            sizes[str(item["Key"])] = int(item["Size"])
    return sizes
