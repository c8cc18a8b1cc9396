"""The option panels of ``--help``, laid out so that no flag name and no word of a help text is cut.

typer draws each panel as one rich table of six columns (flag, short flag, two secondary flags, type,
help) whose widths rich shrinks in proportion when the screen is narrow, with no regard to the
longest word of a column: at 80 columns ``--context-length-estimate`` showed as
``--context-length-estima…`` and ``~/.config/lmi-build/config.toml`` as ``~/.config/lmi-build/confi…``
(issue 30 item 3). Here each panel is laid out from what it holds: the flag column exactly as wide as
its longest flag, the help column at least as wide as its longest word, the type put under the flag
when the two do not fit side by side, and the help under the flag when even that is too wide.
typer's own pieces make the cells (its help text with default and required markers, its type and
range display), so the content and styles are typer's; only the layout is this module's.

Why this code at all (issue 33 asked for typer's own help): typer 0.29 has no public setting for the
panels' column widths. Its own layout still cuts the help of plan, trtllm, neuronx, matrix, publish
and pull at 80 columns (rich's Table also hands spare width to the flag column), and
``rich_markup_mode=None`` (click's formatter) drops the panels and splits words at hyphens
(``~/.config/lmi-`` / ``build/config.toml``). tests/cli/test_cli_80_columns.py checks every --help.
"""

from dataclasses import dataclass
from typing import Any

from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer import rich_utils
from typer.core import TyperArgument

# The panel's border and its padding take two columns on each side.
PANEL_FRAME = 4
GAP = 2  # spaces between the flag column and the help column
TYPE_INDENT = 2  # the type, when it goes under the flag
HELP_INDENT = 4  # the help, when it goes under the flag


@dataclass(frozen=True)
class _Row:
    required: bool
    names: str  # "--model" (a flag) or "target" (an argument)
    short: str  # "-m", or ""
    type: str  # "<path>", "<int range> [x>=1]", or ""
    help: RenderableType
    longest_word: int  # of the help text


def install() -> None:
    """Draw typer's option panels with ``print_options_panel`` and its paragraphs (a command's help
    and epilog) with ``reflow_paragraphs`` (once; a no-op on a typer without them)."""
    if getattr(rich_utils, "_print_options_panel", None) is print_options_panel:
        return
    if not hasattr(rich_utils, "_print_options_panel") or not hasattr(rich_utils, "_get_parameter_help"):
        return  # another typer: its own layout (tests/cli/test_cli_80_columns.py checks the result)
    rich_utils._print_options_panel = print_options_panel
    if hasattr(rich_utils, "_fix_linebreaks"):
        rich_utils._fix_linebreaks = reflow_paragraphs


def reflow_paragraphs(paragraphs: list[str], markup_mode: Any = None) -> str:
    """The paragraphs of a help or an epilog, joined by blank lines, each prose paragraph (no line
    indented) made one line that the console wraps at its width. typer keeps the source's single line
    breaks, so a sentence broken in the source near 100 columns broke again where the screen is
    narrower: at 100 columns the matrix epilog read "failed or" / "could not be planned" (issue 40).
    A paragraph with an indented line (an example, a list) keeps its lines as written."""
    shown = []
    for paragraph in paragraphs:
        lines = paragraph.strip("\n").split("\n")
        prose = all(line and not line[0].isspace() for line in lines)
        shown.append(" ".join(line.strip() for line in lines) if prose else paragraph)
    return "\n\n".join(shown)


def print_options_panel(*, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Console) -> None:
    """One panel of options or arguments, as typer's ``_print_options_panel`` is called."""
    rows = [_row(param, ctx, markup_mode) for param in params]
    if not rows:
        return
    console.print(Panel(_layout(rows, console.width - PANEL_FRAME), border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
                        title=name, title_align=rich_utils.ALIGN_OPTIONS_PANEL))


def _row(param: Any, ctx: Any, markup_mode: Any) -> _Row:
    if isinstance(param, TyperArgument):
        names, short = "", param.display_name_raw + ("..." if param.metavar is None and param.nargs != 1 else "")
    else:
        names = ", ".join(opt for opt in param.opts if opt.startswith("--"))
        short = ", ".join(opt for opt in param.opts if not opt.startswith("--"))
        secondary = ", ".join(param.secondary_opts)
        if secondary:
            names = f"{names} / {secondary}" if names else secondary
    # A flag takes no value: typer showed "<bool>" beside it (``--json <bool>``), as if it took one.
    type_text = "" if _takes_no_value(param) else param.display_type_rich(ctx=ctx) or ""
    if range_text := param._get_number_range_help_str():
        type_text += rich_utils.RANGE_STRING.format(range_text)
    help_renderable = _help(rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode))
    plain = getattr(help_renderable, "plain", "")
    longest = max((len(word) for word in plain.split()), default=0)
    return _Row(required=bool(param.required), names=names, short=short, type=type_text,
                help=help_renderable, longest_word=longest)


def _takes_no_value(param: Any) -> bool:
    """A flag (``--json``, ``--overwrite / --no-overwrite``, ``--help``) or a counter (``-vvv``)."""
    return bool(getattr(param, "is_flag", False) or getattr(param, "count", False))


def _help(columns: Any) -> RenderableType:
    """typer's help cell (rich ``Columns`` of the help, default and required texts) as one text that
    wraps at spaces only; a cell of another kind (markdown help) as it is."""
    parts = list(getattr(columns, "renderables", ()))
    if not parts or not all(isinstance(part, Text) for part in parts):
        return columns
    joined = Text(" ").join(parts)
    joined.overflow = "fold"  # a word wider than the whole screen folds rather than vanishing into "…"
    return joined


def _layout(rows: list[_Row], width: int) -> RenderableType:
    """The rows in the widest layout that cuts nothing: flag, short flag, type and help on one line;
    else the type under the flag; else the help under the flag."""
    star = 2 if any(row.required for row in rows) else 0
    names = max(len(row.names) for row in rows)
    shorts = max(len(row.short) for row in rows)
    types = max(len(row.type) for row in rows)
    help_min = max(max(row.longest_word for row in rows), 1)
    flags = names + (GAP if names and shorts else 0) + shorts
    one_line = star + flags + (GAP if types else 0) + types
    under = max(star + flags, star + TYPE_INDENT + types)
    for left, type_under in ((one_line, False), (under, True)):
        if left + GAP + help_min <= width:
            table = Table.grid(padding=(0, GAP), expand=True)
            table.add_column(no_wrap=True, width=left)
            table.add_column(ratio=1)
            for row in rows:
                table.add_row(_left(row, star, names, shorts, type_under), row.help)
            return table
    stacked = Table.grid(expand=True)
    stacked.add_column()
    for row in rows:
        stacked.add_row(_left(row, star, names, shorts, type_under=True))
        stacked.add_row(Padding(row.help, (0, 0, 0, HELP_INDENT)))
    return stacked


def _left(row: _Row, star: int, names: int, shorts: int, type_under: bool) -> Text:
    text = Text()
    if star:
        text.append("* " if row.required else "  ", style=rich_utils.STYLE_REQUIRED_SHORT)
    flags = row.names.ljust(names) + (" " * GAP if names and shorts else "") + row.short
    text.append_text(rich_utils.highlighter(Text(flags.rstrip() if type_under else flags.ljust(names + shorts +
                                                                                           (GAP if names and shorts else 0)))))
    if row.type:
        text.append("\n" + " " * (star + TYPE_INDENT) if type_under else " " * GAP)
        text.append_text(rich_utils.types_highlighter(Text(row.type, style=rich_utils.STYLE_TYPES)))
    return text
