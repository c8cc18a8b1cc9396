"""`lmi-build profiles list|show`: the LMI containers lmi-build can build for (TensorRT-LLM and Neuron)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from lmi_build.cli.app import new_app
from lmi_build.output import current, identifier

if TYPE_CHECKING:
    from lmi_build.errors import UnknownName
    from lmi_build.targets.hf.profiles import HfProfile
    from lmi_build.targets.neuronx.profiles import NeuronProfile

profiles_app = new_app(help="LMI container profiles, TensorRT-LLM, Neuron and hf (image, versions, layout, defaults).")


@profiles_app.command("list")
def list_command() -> None:
    """List every container profile, TensorRT-LLM, Neuron, then hf (vLLM/LMI-Dist), oldest first; * marks each
    kind's default (hf has none: without --profile it writes the format the newest hf profile loads).

    Example: lmi-build profiles list --json | jq -r '.[] | select(.kind == "neuronx") | .name'
    """
    from rich.table import Table

    from lmi_build.targets.hf.profiles import load_profiles as load_hf_profiles
    from lmi_build.targets.neuronx.profiles import get_profile as get_neuron_profile
    from lmi_build.targets.neuronx.profiles import load_profiles as load_neuron_profiles
    from lmi_build.targets.trtllm.profiles import get_profile, load_profiles

    profiles = load_profiles()
    default = get_profile(None).name
    neuron_profiles = load_neuron_profiles()
    neuron_default = get_neuron_profile(None).name
    rows: list[tuple[str, ...]] = []
    for p in profiles:
        rows.append((("* " if p.name == default else "  ") + p.name, "trtllm", f"TensorRT-LLM {p.tensorrt_llm}",
                     f"TensorRT {p.tensorrt}, CUDA {p.cuda}", p.layout, p.workflow))
    for n in neuron_profiles:
        marker = "* " if n.name == neuron_default else "  "
        rows.append((marker + n.name, "neuronx", f"neuronx-cc {n.neuronx_cc}",
                     f"Neuron SDK {n.neuron_sdk}, TNX {n.transformers_neuronx}"
                     + ("" if n.released else " (unreleased: no image)"), n.layout, n.default_loader))
    hf_profiles = load_hf_profiles()
    for h in hf_profiles:
        loads = ", ".join(f"{m}->{f}" for m, f in h.formats.items() if f)
        rows.append(("  " + h.name, "hf", f"vLLM {h.vllm}", f"transformers {h.transformers}", f"hf ({loads})", h.engine))
    headers = ("name", "kind", "compiler", "runtime", "layout", "workflow / loader")
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
        table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
        table.add_column("name", no_wrap=True, overflow="fold")
        table.add_column("kind; compiler; runtime; layout; loader", overflow="fold")
        for row in rows:
            table.add_row(identifier(row[0]), "; ".join(row[1:]))
    data = [{"kind": "trtllm", **p.model_dump(mode="json"), "default": p.name == default} for p in profiles]
    data += [{"kind": "neuronx", **n.model_dump(mode="json"), "default": n.name == neuron_default}
             for n in neuron_profiles]
    data += [{"kind": "hf", **h.model_dump(mode="json"), "default": False} for h in hf_profiles]
    current().result(data, table)


@profiles_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="Profile name (see `lmi-build profiles list`).", show_default=False)],
) -> None:
    """Show one profile: versions, defaults, the trtllm-build flags of its TensorRT-LLM, and sources.

    Example: lmi-build profiles show lmi-0.27.0-trtllm-0.8.0
    """
    from lmi_build.targets.neuronx.profiles import load_profiles as load_neuron_profiles
    from lmi_build.targets.trtllm.flags import flag_table
    from lmi_build.targets.trtllm.profiles import get_profile

    neuron = next((n for n in load_neuron_profiles() if n.name == name), None)
    if neuron is not None:
        _show_neuron(neuron)
        return
    from lmi_build.targets.hf.profiles import load_profiles as load_hf_profiles

    hf = next((h for h in load_hf_profiles() if h.name == name), None)
    if hf is not None:
        _show_hf(hf)
        return
    from lmi_build.targets.trtllm.profiles import load_profiles

    if all(p.name != name for p in load_profiles()):
        raise _unknown_profile(name)
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


def _unknown_profile(name: str) -> UnknownName:
    """Every known profile, by kind (TensorRT-LLM, Neuron, hf), and the closest names to ``name``."""
    import difflib

    from lmi_build.errors import UnknownName
    from lmi_build.targets.hf.profiles import load_profiles as load_hf_profiles
    from lmi_build.targets.neuronx.profiles import load_profiles as load_neuron_profiles
    from lmi_build.targets.trtllm.profiles import load_profiles

    kinds = {"trtllm": [p.name for p in load_profiles()], "neuronx": [n.name for n in load_neuron_profiles()],
             "hf": [h.name for h in load_hf_profiles()]}
    close = difflib.get_close_matches(name, [known for names in kinds.values() for known in names], n=1, cutoff=0.8)
    listed = "; ".join(f"{kind}: {', '.join(names) or 'none'}" for kind, names in kinds.items())
    return UnknownName(f"unknown container profile '{name}'" + (f" (did you mean {close[0]}?)" if close else ""),
                       hint=f"known profiles, by kind: {listed}")


def _show_neuron(profile: NeuronProfile) -> None:
    from lmi_build.targets.neuronx.sdk import sdk

    unbuilt = {loader: why for loader, why in sdk().unbuilt_loaders.items() if loader in profile.model_loaders}
    data = {"kind": "neuronx", **profile.model_dump(mode="json"), "cache_dir": profile.cache_dir_name,
            "unbuilt_loaders": {loader: why.model_dump(mode="json") for loader, why in unbuilt.items()}}
    lines = [f"[bold]{profile.name}[/bold]  {profile.image or '(no published image)'}"]
    lines += [f"  {key}: {value}" for key, value in profile.versions().items()]
    lines += [f"  NEURON_CC_FLAGS: {profile.neuron_cc_flags}", f"  compile cache: {profile.cache_dir_name}/",
              f"  default loader: {profile.default_loader} (switch to TNX: {profile.tnx_switch}); "
              f"option.model_loader: {', '.join(profile.model_loaders) or 'none'}",
              f"  layout: {profile.layout}   released: {profile.released}"]
    if profile.split_layout_unbuilt:
        lines.append(f"  not built: {profile.split_layout_unbuilt}")
    lines += [f"  not built: option.model_loader={loader}: {why.reason}" for loader, why in unbuilt.items()]
    if profile.inferred:
        lines.append(f"  inferred (not checked against a source): {', '.join(profile.inferred)}")
    if profile.notes:
        lines.append(f"  notes: {profile.notes}")
    lines += [f"  source: {s}" for s in profile.sources]
    current().result(data, "\n".join(lines))


def _show_hf(profile: HfProfile) -> None:
    from rich.markup import escape

    data = {"kind": "hf", **profile.model_dump(mode="json")}
    lines = [f"[bold]{profile.name}[/bold]  engine {profile.engine}"]
    lines += [f"  {key}: {value}" for key, value in profile.versions().items()]
    lines += [f"  --quantize {method}: " + (f"{fmt} checkpoint" if fmt else "not loadable (refused)")
              for method, fmt in profile.formats.items()]
    if profile.inferred:
        lines.append(f"  inferred (not checked against a source): {escape('; '.join(profile.inferred))}")
    lines += [f"  source: {escape(s)}" for s in profile.sources]
    current().result(data, "\n".join(lines))


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
