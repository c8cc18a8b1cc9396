"""``lmi-build publish`` and ``lmi-build pull``: move a verified artifact to and from S3."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.cli.app import EndpointOpt, with_events_option
from lmi_build.cli.unfinished import unfinished_build
from lmi_build.reporting.output import current
from lmi_build.storage.publish import publish
from lmi_build.storage.pull import pull

WorkersOpt = Annotated[int, typer.Option("--workers", min=1, max=64, help="Parallel transfers (files and parts).")]

PUBLISH_HELP = """Upload an artifact to S3, verified, with its manifest last (the commit marker).

Files already present with the same size and SHA-256 are skipped, so a rerun after a failure finishes the job and an unchanged artifact uploads nothing.

Example:

    lmi-build publish ./out/llama-7b-trtllm s3://my-models/llama-7b/trtllm \\
        --delete-local
"""

PULL_HELP = """Download a published artifact, verify every file against its manifest, then move it into place.

An interrupted pull resumes where it stopped. A prefix without a manifest is refused.

Example:

    lmi-build pull s3://my-models/llama-7b/trtllm ./llama-7b-trtllm
"""


def _summary_line(verb: str, data: dict[str, float | int], where: str) -> str:
    mib = data["bytes"] / (1024 * 1024)
    return (f"{verb} {data['objects']} objects ({mib:,.1f} MiB), skipped {data['skipped']}, "
            f"in {data['seconds']:.1f}s: {escape(where)}")  # a path, not markup


def register(app: typer.Typer) -> None:
    @app.command("publish", help=PUBLISH_HELP)
    @with_events_option
    def publish_cmd(
        artifact_dir: Annotated[Path, typer.Argument(help="Artifact directory (holds lmi-build.json).")],
        url: Annotated[str, typer.Argument(help="Destination, s3://bucket/prefix.")],
        endpoint_url: EndpointOpt = None,
        delete_local: Annotated[bool, typer.Option("--delete-local", help="Delete the local artifact after every object is verified remotely.")] = False,
        expected_bucket_owner: Annotated[str | None, typer.Option("--expected-bucket-owner", help="Refuse a bucket owned by another AWS account.")] = None,
        sse_kms_key_id: Annotated[str | None, typer.Option("--sse-kms-key-id", help="Encrypt objects with this KMS key (SSE-KMS).")] = None,
        tarball: Annotated[bool, typer.Option("--tarball", help="Upload one model.tar.gz (SageMaker compressed model data) instead of files.")] = False,
        workers: WorkersOpt = 8,
        overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a different artifact already at the prefix (its stale objects are removed after the new manifest commits).")] = False,
    ) -> None:
        if (unfinished := unfinished_build(str(artifact_dir))) is not None:
            raise unfinished  # an exit-3 output: say what it lacks and how to finish it
        out = current()
        out.interrupted_hint = (f"{MANIFEST_NAME} was not uploaded, so {url} reads as incomplete to every reader; "
                                f"the objects uploaded so far stay there and a rerun skips them: rerun the same "
                                f"command to complete it")
        summary = publish(artifact_dir, url, endpoint_url=endpoint_url, delete_local=delete_local,
                          expected_bucket_owner=expected_bucket_owner, sse_kms_key_id=sse_kms_key_id,
                          tarball=tarball, workers=workers, output=out, overwrite=overwrite)
        data = {"url": url, **summary.model_dump(), "deleted_local": delete_local}
        out.result(data, _summary_line("published", data, url))

    @app.command("pull", help=PULL_HELP)
    @with_events_option
    def pull_cmd(
        url: Annotated[str, typer.Argument(help="Published artifact, s3://bucket/prefix.")],
        dest: Annotated[Path, typer.Argument(help="Local directory to create.")],
        endpoint_url: EndpointOpt = None,
        workers: WorkersOpt = 8,
    ) -> None:
        out = current()
        partial = dest.absolute().parent / f".{dest.absolute().name}.lmi-build-partial"
        out.interrupted_hint = (f"{dest} was not created; the files downloaded so far stay in {partial} (verified "
                                f"again, not downloaded again): rerun the same command to resume")
        summary = pull(url, dest, endpoint_url=endpoint_url, workers=workers, output=out)
        data = {"url": url, "dest": str(dest), **summary.model_dump()}
        out.result(data, _summary_line("pulled", data, str(dest)))
