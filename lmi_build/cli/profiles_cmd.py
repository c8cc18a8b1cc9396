"""`lmi-build profiles list|show`: the LMI TensorRT-LLM containers lmi-build can build for."""

from __future__ import annotations

from typing import Annotated

import typer

from lmi_build.cli.app import new_app
from lmi_build.output import current, identifier

profiles_app = new_app(help="LMI TensorRT-LLM container profiles (image, versions, layout, defaults).")


@profiles_app.command("list")
def list_command() -> None:
    """List every container profile, oldest TensorRT-LLM first; * marks the default.

    Example: lmi-build profiles list --json | jq -r '.[].name'
    """
    from rich.table import Table

    from lmi_build.targets.trtllm.profiles import get_profile, load_profiles

    profiles = load_profiles()
    default = get_profile(None).name
    table = Table()
    # A name is copied into --profile: it stays on one line, and folds (never is cut) past that.
    table.add_column("name", no_wrap=True, overflow="fold")
    for column in ("TensorRT-LLM", "TensorRT", "CUDA", "layout", "workflow"):
        table.add_column(column, overflow="fold")
    for p in profiles:
        table.add_row(identifier(("* " if p.name == default else "  ") + p.name), p.tensorrt_llm, p.tensorrt,
                      p.cuda, p.layout, p.workflow)
    data = [{**p.model_dump(mode="json"), "default": p.name == default} for p in profiles]
    current().result(data, table)


@profiles_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Profile name (see `lmi-build profiles list`).", show_default=False)],
) -> None:
    """Show one profile: versions, defaults, the trtllm-build flags of its TensorRT-LLM, and sources.

    Example: lmi-build profiles show lmi-0.27.0-trtllm-0.8.0
    """
    from lmi_build.targets.trtllm.flags import flag_table
    from lmi_build.targets.trtllm.profiles import get_profile

    profile = get_profile(name)
    table = flag_table(profile.tensorrt_llm)
    data = {**profile.model_dump(mode="json"), "flag_series": table.series,
            "flags": {tool: dict(sorted(flags.items())) for tool, flags in table.tools.items()},
            "removed_flags": {k: v.model_dump() for k, v in table.removed.items()}}
    lines = [f"[bold]{profile.name}[/bold]  {profile.image}"]
    lines += [f"  {key}: {value}" for key, value in profile.versions().items()]
    lines += [f"  layout: {profile.layout}   workflow: {profile.workflow}   engine_capable: {profile.engine_capable}"]
    lines += [f"  default {key} = {value}" for key, value in profile.defaults.items()]
    lines += [f"  flags (series {table.series}):"]
    for tool, flags in table.tools.items():
        lines.append(f"    {tool}: " + " ".join(f"--{f}" for f in sorted(flags)))
    lines += [f"  removed: --{k} ({v.message})" for k, v in table.removed.items()]
    if profile.notes:
        lines.append(f"  notes: {profile.notes}")
    lines += [f"  source: {s}" for s in profile.sources]
    current().result(data, "\n".join(lines))


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
