"""What `verify`, `inspect` and `publish` say about a directory a build stopped at with exit 3 (a checkpoint
with plan.json, or a `--runner script` bundle): not an artifact, what it lacks, and the command that
finishes it (the plan's target says both: ``Target.unfinished``), the same command the build printed as
``next:``."""

from pathlib import Path

from lmi_build.artifact.manifest import MANIFEST_NAME
from lmi_build.core.errors import LmiBuildError, VerifyError
from lmi_build.planning.saved import PLAN_FILE
from lmi_build.targets import get_target, load_saved_plan


def unfinished_build(location: str) -> VerifyError | None:
    """The error for ``location`` when it is an exit-3 output (plan.json, no lmi-build.json), else None."""
    if location.startswith("s3://"):
        return None
    directory = Path(location)
    if not directory.is_dir() or (directory / MANIFEST_NAME).exists() or not (directory / PLAN_FILE).is_file():
        return None
    try:
        saved = load_saved_plan(directory / PLAN_FILE)
    except LmiBuildError:
        return None  # not a plan this lmi-build reads: the plain "no manifest" error says enough
    target = saved.plan.target
    lacks = get_target(target).unfinished(directory.absolute(), saved.plan)
    # A --runner script build exited 0 having written its bundle: not a stop (issue 30 item 6).
    what = f"a {target} --runner script bundle" if lacks.bundle else f"an unfinished {target} build (it stopped with exit 3)"
    return VerifyError(f"{location} is {what}, not an artifact: "
                       f"it has {PLAN_FILE} but no {MANIFEST_NAME}; missing: {lacks.missing}",
                       hint=f"finish it with: {lacks.command}" + (f"; {lacks.where}" if lacks.where else ""))
