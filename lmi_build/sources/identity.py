"""The model a plan was made for against the model found now (a build's fetch, a saved plan planned again)."""

from __future__ import annotations

from lmi_build.core.errors import SourceError
from lmi_build.core.types import ModelIdentity


def check_identity(planned: ModelIdentity, fetched: ModelIdentity, ref: str) -> None:
    """The fetched model must be the planned one: same kind, revision and content digest. A local
    directory may have moved (its name is not its identity); its content may not have changed."""
    problems: list[str] = []
    if planned.kind != fetched.kind:
        problems.append(f"a {fetched.kind} model instead of a {planned.kind} one")
    elif planned.kind != "local" and planned.id != fetched.id:
        problems.append(f"model {fetched.id} instead of {planned.id}")
    if planned.revision and fetched.revision and planned.revision != fetched.revision:
        problems.append(f"revision {fetched.revision} instead of {planned.revision}")
    if planned.digest and fetched.digest and planned.digest != fetched.digest:
        problems.append(f"content {fetched.digest[:19]}… instead of the planned {planned.digest[:19]}…")
    if problems:
        raise SourceError(f"{ref} is not the model that was planned: " + "; ".join(problems),
                          hint="pin --revision, or plan again for the model as it is now")
