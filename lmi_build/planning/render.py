"""Human rendering of a BuildPlan (rich tables), and the one function commands call to print a
plan in the current output mode."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.table import Table
from rich.text import Text

from lmi_build.core.types import PlanMessage
from lmi_build.options.resolve import option_spec
from lmi_build.planning.instances import GIB
from lmi_build.planning.memory_bar import MemoryBar, device_memory
from lmi_build.planning.plan import BuildPlan, MemoryEstimate
from lmi_build.reporting.output import current, human_bytes, human_count, identifier

if TYPE_CHECKING:
    from collections.abc import Iterator


def report_plan(plan: BuildPlan) -> None:
    """Print ``plan``: JSON on stdout (--json), or tables on stdout with errors/warnings on stderr."""
    out = current()
    plan = plan.redacted()  # what is shown never holds a credential (lmi_build/core/redaction.py)
    out.result(plan.to_json(), render=render_plan(plan) if out.human else None)
    if out.mode.value == "json":
        return
    for kind, messages in (("warning", plan.warnings), ("error", plan.errors)):
        for message in messages[:SHOWN_MESSAGES]:
            (out.warn if kind == "warning" else out.error)(_line(message))
        if len(messages) > SHOWN_MESSAGES:
            (out.warn if kind == "warning" else out.error)(
                f"... and {len(messages) - SHOWN_MESSAGES} more {kind}s (--json lists every one)")


# Beyond this many warnings (or errors) a plan summarises: a file of 8k unknown keys is not 8k lines.
SHOWN_MESSAGES = 50


def _line(message: PlanMessage) -> str:
    text = f"[{message.code}] {message.message}"
    if message.hint:
        text += f" -> {message.hint}"
    return text


def render_plan(plan: BuildPlan) -> RenderableType:
    parts: list[Any] = [_model_table(plan)]
    if plan.build is not None:
        parts.append(_mapping_table("Build knobs", plan.build.model_dump(exclude_defaults=False)))
    if plan.quantization.method or plan.quantization.pre_quantized:
        parts.append(_mapping_table("Quantization", plan.quantization.model_dump(exclude_none=True)))
    parts.append(_options_table(plan))
    if plan.memory is not None:
        parts.append(_memory_table(plan))
        parts.append(MemoryBar(device_memory(plan.memory)))
    if plan.checkpoint_step is not None:
        parts.append(_checkpoint_step_table(plan))
    parts.append(_mapping_table("Toolchain", {"profile": plan.toolchain.profile, "image": plan.toolchain.image,
                                              **plan.toolchain.versions}))
    parts.append(_Verdict(plan))
    return Group(*parts)


class _Verdict:
    """``plan: valid   cache key: sha256:...``; on a narrow screen the key whole on a line of its own."""

    def __init__(self, plan: BuildPlan) -> None:
        self.plan = plan

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        plan = self.plan
        status = "[green]valid[/green]" if plan.valid else f"[red]invalid[/red] ({len(plan.errors)} error(s))"
        line = f"plan: {status}   cache key: {plan.cache_key}"
        if len(f"plan: invalid (99 error(s))   cache key: {plan.cache_key}") > options.max_width:
            line = f"plan: {status}   cache key:\n{plan.cache_key}"
        yield Text.from_markup(line)


class _Section:
    """A titled section of label/value rows, laid out as lines: the labels in a column as wide as the
    longest, each value wrapped at spaces after it. A word is never cut or folded: one longer than the
    line (an image URI, an s3:// model, a path) stays whole and the line runs past the screen's edge,
    where the terminal wraps it softly, so it is copied and searched whole (issue 30 item 3)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[str, str]] = []

    def add_row(self, label: str, value: str) -> None:
        self.rows.append((label, value))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        label_width = max((len(label) for label, _ in self.rows), default=0)
        indent = label_width + _GAP
        yield Text(self.title, style="table.title")
        for label, value in self.rows:
            for index, part in enumerate(_wrap_words(value, options.max_width - indent)):
                yield Text.assemble((label.ljust(label_width) if index == 0 else " " * label_width, "bold"),
                                    " " * _GAP, part, no_wrap=True, overflow="ignore")


_GAP = 2  # spaces between a section's labels and its values


def _wrap_words(value: str, width: int) -> list[str]:
    """``value`` in lines of at most ``width`` characters, broken at spaces only (a longer word is
    a line of its own, whole)."""
    return textwrap.wrap(value, max(width, 1), break_long_words=False, break_on_hyphens=False) or [""]


def _model_table(plan: BuildPlan) -> _Section:
    spec = plan.spec
    table = _Section(f"Model ({plan.target}, recipe {plan.recipe} v{plan.recipe_version})")
    rows = {
        "id": f"{plan.model.id} ({plan.model.kind})",
        "revision": plan.model.revision,
        "architecture": f"{spec.architecture} ({spec.model_type})",
        "parameters": human_count(spec.num_parameters),
        "layers / heads / kv heads": f"{spec.num_layers} / {spec.num_attention_heads} / {spec.num_kv_heads}",
        "max positions": spec.max_position_embeddings or f"unbounded ({spec.position_embedding})",
        "pre-quantized": spec.pre_quantization.method if spec.pre_quantization else None,
    }
    for key, value in rows.items():
        if value is not None:
            table.add_row(key, str(value))
    return table


def _mapping_table(title: str, values: dict[str, Any]) -> _Section:
    table = _Section(title)
    for key, value in values.items():
        if value is None or value == {} or value == ():
            continue
        table.add_row(key, _short(value))
    return table


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
    return str(value)


def _options_table(plan: BuildPlan) -> RenderableType:


    rows: list[tuple[str, str, str]] = []
    for key, value in list(plan.options.items())[:SHOWN_OPTIONS]:
        source = plan.option_sources.get(key, "")
        spec = option_spec(key)
        if spec is not None and spec.is_build_only(plan.target):
            source += ", build only"  # planned (it shapes the build), never written to serving.properties
        rows.append((key, _shown_value(value), source))
    more = len(plan.options) - SHOWN_OPTIONS
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    table = Table(title="serving.properties", title_justify="left", box=None, pad_edge=False)
    if sum(widths) + 4 <= current().out.width:
        table.add_column("key", style="bold", no_wrap=True, overflow="fold")
        table.add_column("value", overflow="fold")
        table.add_column("source", style="dim", no_wrap=True, overflow="fold")
        for key, value, source in rows:
            table.add_row(identifier(key), identifier(value), source)
        if more > 0:
            table.add_row(f"... and {more} more", "(--json lists every one)", "")
        return table
    # Narrow (COLUMNS=80): key=value as serving.properties writes it, never folded; one too long for
    # its column has its source on the next line, one longer than the screen runs past its edge.
    return _narrow_options([(f"{key}={value}", source) for key, value, source in rows], more)


def _narrow_options(rows: list[tuple[str, str]], more: int) -> RenderableType:
    width = current().out.width
    sources = max((len(source) for _, source in rows), default=0)
    column = min(max((len(pair) for pair, _ in rows), default=0), max(width - sources - _GAP, 1))
    lines = [Text("serving.properties", style="table.title"),
             Text.assemble(("key=value".ljust(column), "table.header"), " " * _GAP, ("source", "table.header"))]
    for pair, source in rows:
        if len(pair) <= column:
            lines.append(Text.assemble(pair.ljust(column), " " * _GAP, (source, "dim")))
        else:
            lines.append(Text(pair))
            lines.append(Text.assemble(" " * (column + _GAP), (source, "dim")))
    if more > 0:
        lines.append(Text(f"... and {more} more (--json lists every one)"))
    for line in lines:
        line.no_wrap, line.overflow = True, "ignore"
    return Group(*lines)


SHOWN_OPTIONS = 200
# A value longer than this is no identifier a person copies from the screen (a URI or path is far
# shorter): a 5,000-digit batch size from a hostile serving.properties printed whole, line after line.
SHOWN_VALUE_CHARS = 256


def _shown_value(value: str) -> str:
    if len(value) <= SHOWN_VALUE_CHARS:
        return value
    return f"{value[:60]}… ({len(value):,} characters; --json shows it whole)"


def _memory_table(plan: BuildPlan) -> _Section:
    memory = plan.memory
    assert memory is not None  # checked by the caller; not user input
    table = _Section("Memory")
    table.add_row("weights", f"{human_bytes(memory.weight_bytes)} ({human_count(memory.num_parameters)} params)")
    if memory.gpu_memory_utilization is not None:
        _engine_kv_rows(table, memory)
    elif memory.kv_free_fraction is not None:
        _paged_rows(table, memory)
    else:
        table.add_row("KV cache", f"{human_bytes(memory.kv_cache_bytes)} ({memory.kv_bytes_per_token} B/token)")
        device = f"{human_bytes(memory.per_device_bytes)} over {memory.devices} device(s)"
        if memory.device_memory_bytes:
            verdict = "fits" if memory.fits else "does NOT fit"
            if memory.fits and memory.per_device_bytes > memory.device_memory_bytes:
                # A paged KV cache: the estimate is the whole batch at full length, which does not fit;
                # the engine runs fewer sequences at once (the kv_cache_partial warning says how many).
                # "fits" under a larger need read as a contradiction (issue 30 item 6).
                verdict = "the whole batch at full length does not fit; fewer sequences run at once (paged KV cache)"
            device += f"; {memory.instance_type} has {memory.device_memory_bytes / GIB:.1f} GiB usable: {verdict}"
        table.add_row("per device", device)
    if memory.host_ram_bytes:
        table.add_row("host RAM (build)", f"{memory.host_ram_bytes / GIB:.1f} GiB")
    return table


def _paged_rows(table: _Section, memory: MemoryEstimate) -> None:
    """A paged KV cache: what must fit to load, then what the runtime gives the KV cache of the rest."""
    weights = -(-memory.weight_bytes // memory.devices)
    activations = memory.activation_bytes or 0
    runtime = memory.per_device_bytes - weights - activations
    parts = [f"{human_bytes(weights)} weights", f"{human_bytes(activations)} activations"]
    if runtime > 0:
        parts.append(f"{human_bytes(runtime)} runtime")
    load = f"{human_bytes(memory.per_device_bytes)} ({' + '.join(parts)}) on each of {memory.devices} device(s)"
    if memory.device_memory_bytes:
        verdict = "loads" if memory.fits else "does NOT load"
        load += f"; {memory.instance_type} has {memory.device_memory_bytes / GIB:.1f} GiB usable: {verdict}"
    table.add_row("to load", load)
    share = f"{memory.kv_free_fraction or 0:.0%} of the memory free after loading: {memory.kv_fraction_source}"
    # Never "token <word>": the redaction rule reads that as a credential passed as a flag.
    per_token = f"{memory.device_kv_bytes_per_token:,} B each token"
    if memory.kv_cache_tokens is None:
        table.add_row("KV cache", f"paged, on each device {per_token}; {share}; --instance-type sizes it")
    elif memory.fits:
        table.add_row("KV cache", f"{memory.kv_cache_tokens:,} tokens ({human_bytes(memory.kv_cache_device_bytes or 0)} "
                      f"on each device, {per_token}), {share}")
        table.add_row("sequences", f"{memory.full_length_sequences:,} of max_seq_len {memory.max_seq_len:,} fit in it at "
                      f"once (the engine batches at most {memory.max_batch_size:,})")
    else:
        table.add_row("KV cache", f"none: the engine does not load; {share}")


def _engine_kv_rows(table: _Section, memory: MemoryEstimate) -> None:
    """vLLM / LMI-Dist: its share of the device, what loading takes of it, the KV cache left and whether one
    max_model_len sequence fits (the engine's start-up check)."""
    weights = -(-memory.weight_bytes // memory.devices)
    activations = memory.activation_bytes or 0
    graphs = memory.cudagraph_bytes or 0
    runtime = memory.per_device_bytes - weights - activations - graphs
    cuda_graphs = f" + {human_bytes(graphs)} CUDA graphs" if memory.cudagraph_bytes is not None else ""
    load = (f"{human_bytes(memory.per_device_bytes)} ({human_bytes(weights)} weights + {human_bytes(activations)} "
            f"profiled activations{cuda_graphs} + {human_bytes(runtime)} runtime) on each of {memory.devices} device(s)")
    table.add_row("to load", load)
    util = f"gpu_memory_utilization {memory.gpu_memory_utilization:g} ({memory.kv_fraction_source})"
    per_token = f"{memory.device_kv_bytes_per_token:,} B each token"
    need = (f"one sequence of max_model_len {memory.max_seq_len:,} needs {human_bytes(memory.kv_cache_needed_bytes or 0)}")
    if memory.kv_cache_tokens is None:
        table.add_row("KV cache", f"{util}; on each device {per_token}; {need}; --instance-type sizes it")
        return
    table.add_row("KV cache", f"{memory.kv_cache_tokens:,} tokens ({human_bytes(memory.kv_cache_device_bytes or 0)} on "
                  f"each device, {per_token}) of {memory.instance_type}'s {human_bytes(memory.device_memory_bytes or 0)} x {util}")
    if memory.sequence_checked is False:  # LMI-Dist 8: its warmup is the start-up check, no sequence length
        outcome = "starts (no sequence length is checked)" if memory.fits else "fails its start-up warmup"
        table.add_row("sequences", f"{memory.full_length_sequences:,} of max_model_len {memory.max_seq_len:,} fit in it at "
                      f"once (the engine batches at most {memory.max_batch_size:,}); {need}; {outcome}")
    elif memory.fits:
        table.add_row("sequences", f"{memory.full_length_sequences:,} of max_model_len {memory.max_seq_len:,} fit in it at "
                      f"once (the engine batches at most {memory.max_batch_size:,}); {need}: starts")
    else:
        table.add_row("sequences", f"{need}: the engine refuses to start; the largest max_model_len that fits is "
                      f"{memory.max_model_len_fits or 0:,}")


def _checkpoint_step_table(plan: BuildPlan) -> _Section:
    step = plan.checkpoint_step
    assert step is not None  # checked by the caller; not user input
    table = _Section(f"{'Quantize' if step.method else 'Convert'} step (estimate)")
    where = f"cuda, {step.gpus} GPU{'s' if step.gpus != 1 else ''}" if step.device == "cuda" else "cpu"
    table.add_row("device", f"{where} ({step.detected}); weights loaded in {step.load_dtype}")
    if step.calibration_tokens:
        table.add_row("calibration", f"~{step.calibration_tokens} tokens")
    table.add_row("time", f"~{_duration(step.seconds)}" if step.seconds is not None else "unknown (no measured rate)")
    table.add_row("host RAM", f"{step.host_ram_bytes / GIB:.1f} GiB peak")
    if step.gpu_bytes_per_device is not None:
        table.add_row("GPU memory", f"{step.gpu_bytes_per_device / GIB:.1f} GiB per GPU")
    for line in step.basis:
        table.add_row("basis", line)
    return table


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
