"""Verify and describe artifacts wherever they are: a local directory or a published s3:// prefix.

The artifact package checks local directories and compatibility from a manifest; this module adds
the remote side (every object against the manifest) and chooses by location.
"""

from __future__ import annotations

from pathlib import Path

from lmi_build.artifact.files import MANIFEST_NAME
from lmi_build.artifact.manifest import Manifest, load_manifest
from lmi_build.artifact.serving import ServingTarget
from lmi_build.artifact.target_api import TargetsByName
from lmi_build.artifact.verify import (
    Checks,
    VerifyReport,
    check_compatibility,
    compatibility_check,
    container_startup,
    summarize,
    verify_local,
)
from lmi_build.core.errors import LmiBuildError, VerifyError
from lmi_build.core.types import PlanMessage
from lmi_build.storage.publish import remote_manifest, verify_remote
from lmi_build.storage.remote import remote_reader


def verify_s3(url: str, targets: TargetsByName, *, serving: ServingTarget | None = None,
              endpoint_url: str | None = None) -> VerifyReport:
    """Verify a published artifact: the remote files against the manifest, and compatibility from
    the remote manifest. The layout's structural checks need the files locally (`lmi-build pull`)."""
    checks = Checks()
    try:
        files = list(verify_remote(url, endpoint_url))
        manifest = remote_manifest(url, endpoint_url)
    except VerifyError as error:  # e.g. a corrupt remote manifest
        checks.add("manifest", [PlanMessage(code="manifest", message=error.message, hint=error.hint)])
        return checks.report({"location": url})
    if manifest is None:
        if files:
            checks.add("files", files)
        else:
            checks.add("manifest", [PlanMessage(code="manifest", message=f"no {MANIFEST_NAME} under {url}")])
        return checks.report({"location": url})
    checks.add("manifest")
    checks.add("files", files)
    target = targets.get(manifest.target)
    if target is None:
        unknown = PlanMessage(code="target_unknown", message=f"artifact of target '{manifest.target}', which this "
                              f"lmi-build does not know", hint="upgrade lmi-build")
        checks.add("target", [unknown])
        return checks.report(summarize(manifest, url))
    serving = serving or ServingTarget()
    checks.add("records", target.record_problems(manifest, remote_reader(url, manifest, endpoint_url)))
    checks.add(compatibility_check(serving), *check_compatibility(manifest, target, serving))
    return checks.report(summarize(manifest, url), container_startup(manifest, target, serving))


def verify(location: str, targets: TargetsByName, *, serving: ServingTarget | None = None,
           endpoint_url: str | None = None) -> VerifyReport:
    if location.startswith("s3://"):
        return verify_s3(location, targets, serving=serving, endpoint_url=endpoint_url)
    return verify_local(Path(location), targets, serving=serving)


def load_any(location: str, endpoint_url: str | None = None) -> Manifest:
    """The manifest of a local artifact directory or of a published ``s3://`` artifact."""
    if location.startswith("s3://"):
        manifest = remote_manifest(location, endpoint_url)
        if manifest is None:
            raise VerifyError(f"no {MANIFEST_NAME} under {location}",
                              hint="publish the artifact there first, or check the URL")
        return manifest
    path = Path(location)
    if path.exists() and not path.is_dir() and path.name != MANIFEST_NAME:
        # As verify says it: a file (README.md) is not an artifact, not a corrupt one (issue 30 item 6).
        raise LmiBuildError(f"{path} is not a directory",
                            hint=f"give the artifact directory (or its {MANIFEST_NAME}) or an s3:// URL", code="not_found")
    return load_manifest(path)
