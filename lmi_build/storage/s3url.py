"""``s3://bucket/prefix`` parsing, shared by publish, pull, verify and the S3 model source."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lmi_build.core.errors import LmiBuildError, PublishError

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # no leading or trailing slash; "" for the bucket root

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def relative(self, key: str) -> str:
        return key[len(self.prefix) + 1 :] if self.prefix else key

    @property
    def list_prefix(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_s3_url(url: str, *, error: type[LmiBuildError] = PublishError) -> S3Url:
    if not url.startswith("s3://"):
        raise error(f"not an S3 URL: {url!r}", hint="write it as s3://bucket/prefix")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if "@" in bucket:
        # s3://KEY:SECRET@bucket: no S3 client reads credentials from the URL, and the URL is printed.
        raise error("an S3 URL holds credentials (s3://KEY:SECRET@bucket); they are never read from a URL",
                    hint="write s3://bucket/prefix and pass credentials as AWS_* environment variables or a profile")
    if not _BUCKET.match(bucket):
        raise error(f"invalid S3 bucket name {bucket!r} in {url!r}", hint="write it as s3://bucket/prefix")
    prefix = prefix.strip("/")
    if any(part in ("..", ".") for part in prefix.split("/")) or "//" in prefix:
        raise error(f"invalid S3 prefix in {url!r}", hint="use a plain prefix without '..' or empty parts")
    return S3Url(bucket=bucket, prefix=prefix)
