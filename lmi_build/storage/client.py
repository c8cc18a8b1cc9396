"""The boto3 S3 client lmi-build uses, and the one place botocore failures become one-line errors.

boto3 is imported inside the functions so that ``--help`` and ``plan`` stay fast.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lmi_build.core.errors import LmiBuildError, MissingDependency, PublishError
from lmi_build.core.redaction import redact_text
from lmi_build.storage.bounded import S3Unbounded, read_timeout_s
from lmi_build.storage.s3url import S3Url, parse_s3_url
from lmi_build.storage.transfer import max_bandwidth

_MISSING_BUCKET_CODES = {"NoSuchBucket", "404", "NotFound"}
_DENIED_CODES = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled", "AccountProblem"}
_BAD_KEY_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}


def endpoint_label(endpoint_url: str | None) -> str:
    """The endpoint as shown in messages: explicit flag, then AWS_ENDPOINT_URL, then AWS itself;
    a ``user:password@`` in it is never shown."""
    label = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
    return redact_text(label)


def s3_client(endpoint_url: str | None, *, workers: int = 8) -> Any:
    """A thread-safe S3 client with a connection pool big enough for ``workers`` transfers.

    boto3 itself honours AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3 when ``endpoint_url`` is None."""
    # With awscrt installed, botocore signs with the CRT's signers, which read the request body through
    # awscrt's stream and print a traceback of their own to stderr when a transfer is cancelled (an
    # AccessDenied on one part cancels the others): every error must stay one line. Read by
    # botocore.compat when botocore is first imported; a user's explicit setting wins.
    os.environ.setdefault("BOTO_DISABLE_CRT", "true")
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 is a core dependency
        raise MissingDependency.for_module("boto3", "s3") from exc

    config = Config(
        max_pool_connections=max(10, workers * 2),
        retries={"max_attempts": 3, "mode": "standard"},
        connect_timeout=5,
        read_timeout=read_timeout_s(),
    )
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(botocore_session=_botocore_session())
        client = session.client("s3", endpoint_url=endpoint_url or None, config=config)
    except (BotoCoreError, ValueError) as exc:  # partial credentials, a malformed endpoint URL
        translated = translate(exc, None, endpoint_label(endpoint_url), operation="setting up the S3 client")
        raise (translated or PublishError(f"cannot set up the S3 client: {_safe(exc)}",
                                          hint="check --endpoint-url and the AWS_* variables")) from exc
    from lmi_build.storage import watched  # imports botocore: only once a client is made

    # read_timeout bounds one read; this bounds each request as a whole (a trickled answer).
    watched.install(client, answer_seconds=read_timeout_s(), max_bandwidth=max_bandwidth())
    return client


# A bucket in another region (S3 answers 301 PermanentRedirect, or 307 while a new bucket's DNS
# spreads; a HEAD has no body, only the status). botocore follows AWS's own once, never a custom
# endpoint's: each is one line naming where to go.
_REDIRECT_CODES = {"PermanentRedirect", "TemporaryRedirect", "301", "307", "AuthorizationHeaderMalformed"}
# S3 refuses a signature more than 15 minutes off its own clock (RequestTimeTooSkewed; a HEAD's
# 403 has no code): the Date of its answer says whether that is why.
_SKEW_SECONDS = 15 * 60


def _redirected(response: Mapping[str, Any], where: S3Url | None, endpoint: str,
                error: type[LmiBuildError]) -> LmiBuildError:
    info = response.get("Error", {})
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    region = str(info.get("Region") or headers.get("x-amz-bucket-region") or "")
    target = str(info.get("Endpoint") or "")
    bucket = f"bucket '{where.bucket}'" if where else "the bucket"
    to = " and ".join(part for part in (f"region {region}" if region else "",
                                         f"endpoint {redact_text(target)}" if target else "") if part)
    return error(f"the S3 endpoint {endpoint} redirects {bucket} elsewhere" + (f" ({to})" if to else ""),
                 hint=(f"set AWS_REGION={region}" if region else "give the bucket's region in AWS_REGION")
                 + " or --endpoint-url to the bucket's own endpoint, and retry")


def _clock_skew(response: Mapping[str, Any]) -> str:
    """How far this machine's clock is off the server's, when S3 refused the request for it
    (RequestTimeTooSkewed, or a 403 whose Date is more than 15 minutes away); else ''."""
    code = str(response.get("Error", {}).get("Code", ""))
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    skew: float | None = None
    with contextlib.suppress(TypeError, ValueError, IndexError):
        skew = time.time() - email.utils.parsedate_to_datetime(str(date)).timestamp()
    if code != "RequestTimeTooSkewed" and (code not in _DENIED_CODES or skew is None or abs(skew) < _SKEW_SECONDS):
        return ""
    if skew is None:
        return "more than 15 minutes off"
    return f"{abs(skew) / 60:.0f} minutes {'ahead of' if skew > 0 else 'behind'}"


@functools.cache
def _model_loader() -> Any:
    """botocore's loader of its service models, one for the process: a new session reads and parses
    S3's model, endpoints and rule set (~5 MB of JSON) again, 0.15-0.4 CPU-s per client on the
    storage benchmark, paid by every pull, publish and each of verify's three clients (issue 42
    item 10). The files are botocore's own (and AWS_DATA_PATH's, read once here); credentials,
    region and endpoint stay per session."""
    import botocore.loaders

    return botocore.loaders.create_loader()


def _botocore_session() -> Any:
    import botocore.session

    session = botocore.session.get_session()
    session.register_component("data_loader", _model_loader())
    return session


def _safe(exc: BaseException) -> str:
    return redact_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def translate(
    exc: BaseException,
    where: S3Url | None,
    endpoint: str,
    *,
    error: type[LmiBuildError] = PublishError,
    operation: str = "S3 request",
) -> LmiBuildError | None:
    """A one-line error for a botocore/s3transfer failure, or None when it is not an S3 failure.

    Never includes credentials: botocore's messages name the access key id at most, and we do
    not repeat even that."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(exc, PartialCredentialsError):
        return error(
            f"incomplete AWS credentials ({_safe(exc)})",
            hint="set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (non-empty), or neither",
        )
    if isinstance(exc, NoCredentialsError):
        return error(
            f"no AWS credentials found for {where or endpoint}",
            hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run on a host with an IAM role",
        )
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return error(
            f"cannot connect to the S3 endpoint {endpoint}",
            hint="check --endpoint-url / AWS_ENDPOINT_URL and that the server is running",
        )
    if isinstance(exc, ReadTimeoutError):
        return error(f"the S3 endpoint {endpoint} stopped answering during {operation}", hint="retry; it resumes")
    if isinstance(exc, S3Unbounded):  # a body, a size or a listing past its bound
        return error(f"the S3 endpoint {endpoint} {exc.what}", hint=exc.hint)
    if isinstance(exc, S3UploadFailedError):
        return error(f"upload to {where} failed: {exc}", hint="rerun the same command; it resumes")
    if isinstance(exc, RecursionError):  # a redirect botocore followed round and round
        return error(f"the S3 endpoint {endpoint} redirected {operation} without end",
                     hint="give the bucket's own endpoint with --endpoint-url (or its region with AWS_REGION)")
    if isinstance(exc, ClientError):
        info = exc.response.get("Error", {})
        code = str(info.get("Code", ""))
        if code in _REDIRECT_CODES:
            return _redirected(exc.response, where, endpoint, error)
        if skew := _clock_skew(exc.response):
            return error(f"the S3 endpoint {endpoint} refused {operation}: this machine's clock is {skew} "
                         "the server's (clock skew)",
                         hint="set the clock right (NTP: timedatectl set-ntp true, chronyc makestep) and retry")
        if (code in _MISSING_BUCKET_CODES and operation == "head_bucket") or code == "NoSuchBucket":
            return error(
                f"bucket '{where.bucket if where else '?'}' does not exist at {endpoint}",
                hint="create it or check the name",
            )
        if code in _BAD_KEY_CODES:
            return error(
                f"the S3 endpoint {endpoint} rejected the credentials ({code})",
                hint="check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE",
            )
        if code in _DENIED_CODES:
            return error(
                f"access denied to {where} during {operation}",
                hint="check the credentials' permissions (and --expected-bucket-owner if given)",
            )
        message = str(info.get("Message", "")) or str(exc)
        return error(f"S3 error {code} during {operation} on {where}: {_safe(Exception(message))}",
                     hint="rerun with --debug for details")
    if isinstance(exc, BotoCoreError):  # connection closed, bad endpoint, ... : still one line
        return error(f"S3 {operation} failed at {endpoint}: {_safe(exc)}", hint="check the endpoint and retry")
    return None


@contextmanager
def s3_errors(
    where: S3Url, endpoint: str, *, error: type[LmiBuildError] = PublishError, operation: str = "S3 request"
) -> Iterator[None]:
    """Turn S3 failures inside the block into one-line ``error``s (others propagate unchanged)."""
    try:
        yield
    except LmiBuildError:
        raise
    except Exception as exc:
        translated = translate(exc, where, endpoint, error=error, operation=operation)
        if translated is None:
            raise
        raise translated from exc


def check_bucket(client: Any, where: S3Url, endpoint: str, *, expected_owner: str | None = None,
                 error: type[LmiBuildError] = PublishError) -> None:
    """Fail early, with the bucket's name, when it is missing or not ours."""
    kwargs: dict[str, str] = {"Bucket": where.bucket}
    if expected_owner:
        kwargs["ExpectedBucketOwner"] = expected_owner
    with s3_errors(where, endpoint, error=error, operation="head_bucket"):
        client.head_bucket(**kwargs)


def check_writable(client: Any, where: S3Url, endpoint: str, *, error: type[LmiBuildError] = PublishError) -> None:
    """Fail before an hour of building when the credentials may read but not write: put a
    zero-byte probe object under the prefix and delete it again."""
    key = where.key(f".lmi-build-write-probe-{uuid.uuid4().hex[:12]}")
    with s3_errors(where, endpoint, error=error, operation="a test write"):
        client.put_object(Bucket=where.bucket, Key=key, Body=b"")
        client.delete_object(Bucket=where.bucket, Key=key)


def check_publish_targets(urls: Iterable[str], endpoint_url: str | None) -> None:
    """Before a matrix builds anything: every distinct bucket its builds publish to exists and takes
    a zero-byte test write under the first prefix that uses it, as a single build's ``--publish``
    is checked (a matrix whose publish bucket did not exist built and cached every entry first)."""
    endpoint = endpoint_label(endpoint_url)
    checked: set[str] = set()
    client: Any = None
    for url in urls:
        target = parse_s3_url(url)
        if target.bucket in checked:
            continue
        checked.add(target.bucket)
        client = client or s3_client(endpoint_url)
        check_bucket(client, target, endpoint)
        check_writable(client, target, endpoint)
