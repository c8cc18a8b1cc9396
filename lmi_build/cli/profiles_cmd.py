"""`lmi-build profiles list|show`: the LMI containers lmi-build can build for, each target's in the
registry's order, as the target describes them (``Target.profile_rows``, ``Target.profile_view``)."""

import difflib
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from lmi_build.cli.app import new_app
from lmi_build.core.container_profiles import ProfileRow
from lmi_build.core.errors import UnknownName
from lmi_build.core.versions import parse_lmi_version
from lmi_build.reporting.output import ListingTable, current, identifier
from lmi_build.targets import TARGETS

profiles_app = new_app(help="LMI container profiles, TensorRT-LLM, Neuron and hf (image, versions, layout, defaults).")


@profiles_app.command("list")
def list_command() -> None:
    """List every container profile, TensorRT-LLM, Neuron, then hf (vLLM/LMI-Dist), oldest first; * marks each
    kind's default, its newest published image (hf has none: without --profile it writes the format the newest
    hf profile loads). "image": DLC, a published AWS Deep Learning Container (its ECR URI: --json "dlc"), DJL,
    only DJL's own build, or none; "newest" marks each kind's newest release.

    Example: lmi-build profiles list --json | jq -r '.[] | select(.kind == "neuronx") | .name'
    """
    listed = [(target.name, row) for target in TARGETS.values() for row in target.profile_rows()]
    newest = newest_releases(listed)
    rows = [(("* " if row.default else "  ") + row.name, kind, row.compiler, row.runtime, row.layout, row.workflow,
             image_kind(row.data) + (", newest" if row.name in newest else "")) for kind, row in listed]
    headers = ("name", "kind", "compiler", "runtime", "layout", "workflow / loader", "image")
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    # A name is copied into --profile: it stays on one line, and folds (never is cut) past that.
    if sum(widths) + 3 * len(widths) + 1 <= current().out.width:
        table = Table()
        table.add_column("name", no_wrap=True, overflow="fold")
        for column in headers[1:]:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(identifier(row[0]), *row[1:])
    else:
        # Narrow (COLUMNS=80): the name, then the rest as one cell wrapped at spaces, never mid-word.
        table = ListingTable(box=None, pad_edge=False, padding=(0, 2, 0, 0))
        table.add_column("name", no_wrap=True, overflow="fold")
        table.add_column("kind; compiler; runtime; layout; loader; image", overflow="fold")
        for row in rows:
            table.add_row(identifier(row[0]), "; ".join(row[1:]))
    data = [{"kind": kind, **row.data, "default": row.default, "published": row.data.get("dlc") is not None,
             "newest": row.name in newest} for kind, row in listed]
    current().result(data, table)


def image_kind(data: dict[str, Any]) -> str:
    """A profile's image as ``profiles list`` names it: a published DLC, DJL's own build, or none."""
    if data.get("dlc"):
        return "DLC"
    return "DJL" if data.get("image", True) else "none"


def newest_releases(listed: Sequence[tuple[str, ProfileRow]]) -> set[str]:
    """Each kind's newest LMI release (of a pinned image: a moving nightly tag is not a release)."""
    newest: dict[str, ProfileRow] = {}
    for kind, row in listed:
        if row.data.get("released", True) is False:
            continue
        best = newest.get(kind)
        if best is None or parse_lmi_version(row.data["lmi_version"]) > parse_lmi_version(best.data["lmi_version"]):
            newest[kind] = row
    return {row.name for row in newest.values()}


@profiles_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Profile name (see `lmi-build profiles list`).", show_default=False)],
) -> None:
    """Show one profile: versions, defaults, the trtllm-build flags of its TensorRT-LLM, and sources.

    Example: lmi-build profiles show lmi-0.27.0-trtllm-0.8.0
    """
    for target in TARGETS.values():
        if name in target.container_profiles():
            view = target.profile_view(name)
            lines = [f"[bold]{escape(name)}[/bold]  {escape(view.heading)}", *(escape(line) for line in view.lines)]
            current().result(view.data, "\n".join(lines))
            return
    raise _unknown_profile(name)


def _unknown_profile(name: str) -> UnknownName:
    """Every known profile, by kind (target), and the closest names to ``name``."""
    kinds = {target.name: list(target.container_profiles()) for target in TARGETS.values()}
    close = difflib.get_close_matches(name, [known for names in kinds.values() for known in names], n=1, cutoff=0.8)
    listed = "; ".join(f"{kind}: {', '.join(names) or 'none'}" for kind, names in kinds.items())
    return UnknownName(f"unknown container profile '{name}'" + (f" (did you mean {close[0]}?)" if close else ""),
                       hint=f"known profiles, by kind: {listed}")


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
