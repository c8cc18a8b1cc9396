"""``inspect``: a readable account of an artifact, from its manifest alone (no weights read)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table

from lmi_build.artifact.manifest import Manifest
from lmi_build.reporting.output import human_bytes

# Build fields shown under "what", per target, in this order (absent ones are skipped).
_SHAPE_FIELDS = ("tp", "pp", "dtype", "amp", "max_input_len", "max_output_len", "max_seq_len", "max_batch_size",
                 "max_num_tokens", "n_positions", "context_length_estimate", "batch_size", "export_format",
                 "gqa_effective", "compiler_flags", "platform")


def describe(manifest: Manifest, location: str) -> dict[str, Any]:
    plan = manifest.plan
    spec = plan.get("spec") or {}
    build = plan.get("build") or {}
    quant = plan.get("quantization") or {}
    largest = sorted(manifest.files, key=lambda f: f.size, reverse=True)[:5]
    return {
        "location": location,
        "what": {
            "target": manifest.target,
            "layout": manifest.layout,
            "architecture": (spec.get("architectures") or [spec.get("model_type")])[0],
            "model_type": spec.get("model_type"),
            "parameters": spec.get("num_parameters"),
            "quantization": {k: quant.get(k) for k in ("method", "quant_algo", "kv_cache_quant_algo", "group_size")
                             if quant.get(k) is not None} or None,
            **{k: build[k] for k in _SHAPE_FIELDS if build.get(k) is not None},
        },
        "from": {**manifest.source.model_dump(mode="json", exclude_none=True),
                 "recipe": f"{manifest.recipe} v{manifest.recipe_version}", "cache_key": manifest.cache_key},
        "for": {
            "container_profile": manifest.toolchain.profile,
            "image": manifest.toolchain.image,
            "versions": {k: manifest.toolchain.version(k)
                         for k in sorted({*manifest.toolchain.expected, *manifest.toolchain.found})},
            **manifest.hardware.model_dump(mode="json", exclude_none=True),
        },
        "size": {"files": len(manifest.files), "total_bytes": manifest.total_bytes,
                 "content_digest": manifest.content_digest,
                 "largest": [{"path": f.path, "bytes": f.size} for f in largest]},
        "steps": [step.model_dump(mode="json", exclude_none=True) for step in manifest.steps],
        "total_seconds": round(sum(step.seconds for step in manifest.steps), 3),
        "built": {"at": manifest.created_at.isoformat(), "by": manifest.builder,
                  "environment": manifest.environment.model_dump(mode="json")},
        "serving_properties": manifest.serving_properties,
    }


# A manifest is the artifact's own data, of any size: a section shows this many rows (and a value
# this many items), then a count, so 200k entries are not 200k lines.
SHOWN_ROWS = 50


def _joined(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN_ROWS])
    return shown + (f", ... and {len(items) - SHOWN_ROWS} more" if len(items) > SHOWN_ROWS else "")


def render(info: dict[str, Any]) -> RenderableType:
    def section(title: str, rows: dict[str, Any], last: dict[str, Any] | None = None) -> Table:
        table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
        table.add_column(style="bold", no_wrap=True, overflow="fold")
        table.add_column(overflow="fold")  # ids, image URIs, paths: folded, never cut with "…"
        for index, (key, value) in enumerate(rows.items()):
            if index == SHOWN_ROWS:
                table.add_row(f"... and {len(rows) - SHOWN_ROWS} more", "(--json lists every one)")
                break
            if value is None or value == {} or value == []:
                continue
            if isinstance(value, dict):
                value = _joined([f"{k}={v}" for k, v in value.items()])
            elif isinstance(value, list):
                value = _joined(list(map(str, value)))
            table.add_row(escape(str(key)), escape(str(value)))
        for key, value in (last or {}).items():  # a total: shown however many rows were cut
            table.add_row(key, escape(str(value)))
        return table

    size = info["size"]
    steps = {step["name"]: f"{step['seconds']:.1f} s" + (f"  ({step['detail']})" if step.get("detail") else "")
             for step in info["steps"]}
    env = info["built"]["environment"]
    return Group(
        f"[bold]{escape(info['location'])}[/bold]",
        section("What", info["what"]),
        section("From", info["from"]),
        section("For", {**{k: v for k, v in info["for"].items() if k != "versions"}, **info["for"]["versions"]}),
        section("Size", {"files": size["files"], "total": human_bytes(size["total_bytes"]),
                         "largest": [f"{f['path']} ({human_bytes(f['bytes'])})" for f in size["largest"]],
                         "digest": size["content_digest"]}),
        section("Steps", steps, last={"total": f"{info['total_seconds']:.1f} s"}),
        section("Built", {"at": info["built"]["at"], "by": info["built"]["by"],
                          "host": f"{env['os']} {env['arch']}, Python {env['python']}",
                          "packages": env["packages"]}),
        section("serving.properties", info["serving_properties"]),
    )
