"""``lmi-build recipes``: which architectures lmi-build can build, for which target, how."""

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table

from lmi_build.cli.app import new_app
from lmi_build.cli.profiles_cmd import _unknown_profile
from lmi_build.core.target_names import TARGET_NAMES
from lmi_build.planning.target_api import RecipeRoute, route_for
from lmi_build.recipes.registry import load_recipes
from lmi_build.recipes.schema import Recipe, TargetSupport, VersionOption
from lmi_build.reporting.output import ListingTable, current, identifier
from lmi_build.targets import TARGETS

LIST_EPILOG = """[bold]Examples[/bold]

  lmi-build recipes list

  lmi-build recipes list --json \\
      | jq '.recipes[] | select(.targets.trtllm) | .name'

  lmi-build recipes list --profile lmi-0.29.0-trtllm-0.11.0

  lmi-build recipes list --profile lmi-0.33.0-trtllm-0.21.0 --json \\
      | jq '.recipes[] | select(.on_profile.builds) | .name'"""

SHOW_EPILOG = """[bold]Examples[/bold]

  lmi-build recipes show llama

  lmi-build recipes show baichuan --json"""


def register(app: typer.Typer) -> None:
    recipes_app = new_app(help="Supported architectures: targets, quantization, restricted options.")
    recipes_app.command("list", epilog=LIST_EPILOG)(list_recipes)
    recipes_app.command("show", epilog=SHOW_EPILOG)(show_recipe)
    app.add_typer(recipes_app, name="recipes")


def list_recipes(
    profile: Annotated[str | None, typer.Option(
        "--profile", show_default=False,
        help="A container profile (lmi-build profiles list): which recipes it builds, by which route, and "
             "why not for the others (for a family its toolchain lacks, the first release that has it).")] = None,
) -> None:
    """List every recipe (architecture family) and what each target supports for it."""
    book = load_recipes()
    if profile is None:
        data = {"directory": str(book.directory), "recipes": [_recipe_json(r) for r in book]}
        current().result(data, _list_table(book.all()))
        return

    target = _profile_target(profile)
    routes = {recipe.name: route_for(target, recipe, profile) for recipe in book}
    data = {"directory": str(book.directory), "profile": profile, "target": target.name,
            "recipes": [{**_recipe_json(r), "on_profile": _route_json(routes[r.name])} for r in book]}
    current().result(data, _profile_table(book.all(), routes, profile, target.name))


def _profile_target(profile: str) -> Any:
    """The target whose container profiles include ``profile`` (a ``PlanningTarget``)."""
    for target in TARGETS.values():
        if profile in target.container_profiles():
            return target
    raise _unknown_profile(profile)


def _route_json(route: RecipeRoute) -> dict[str, Any]:
    return {"builds": route.builds, "route": route.route, "reason": route.reason}


def _profile_table(recipes: tuple[Recipe, ...], routes: dict[str, RecipeRoute], profile: str,
                   target: str) -> RenderableType:
    built = sum(1 for route in routes.values() if route.builds)
    table = Table(title=f"lmi-build recipes on {profile} ({target}): {built} of {len(recipes)} build",
                  box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("recipe", style="bold", no_wrap=True, overflow="fold")
    table.add_column("builds", no_wrap=True)
    table.add_column("route, or why not", overflow="fold")
    for recipe in recipes:
        route = routes[recipe.name]
        table.add_row(identifier(recipe.name), "[green]yes[/green]" if route.builds else "[red]no[/red]",
                      route.route if route.builds else route.reason)
    return table


def show_recipe(
    name: str = typer.Argument(..., help="Recipe name, as in `lmi-build recipes list` (e.g. llama)."),
) -> None:
    """Show one recipe: matched architectures, per-target quantization, options and version inference."""
    recipe = load_recipes().get(name)
    current().result(_recipe_json(recipe), _show(recipe))


def _recipe_json(recipe: Recipe) -> dict[str, Any]:
    return recipe.model_dump(mode="json")


def _support_cell(support: TargetSupport | None) -> str:
    if support is None:
        return "[dim]-[/dim]"
    methods = ", ".join(support.quantize)
    return f"[green]yes[/green] {methods}" if methods else "[green]yes[/green]"


def _list_table(recipes: tuple[Recipe, ...]) -> RenderableType:
    title = "lmi-build recipes (cell: supported, quantization methods lmi-build applies)"
    names = max((len(recipe.name) for recipe in recipes), default=6)
    architectures = max((len(a) for recipe in recipes for a in (recipe.architectures or recipe.model_types)), default=13)
    # Each target column as wide as its longest method name ("smoothquant,"), so none is cut mid-word.
    words = max((len(m) + 1 for recipe in recipes for s in recipe.targets.values() for m in s.quantize), default=3)
    if names + architectures + len(TARGET_NAMES) * max(words, 7) + 3 * (2 + len(TARGET_NAMES)) + 1 \
            <= current().out.width:
        table = Table(title=title)
        table.add_column("recipe", style="bold", no_wrap=True, overflow="fold")
        table.add_column("architectures", no_wrap=True, overflow="fold")  # one class name per line
        for target in TARGET_NAMES:
            table.add_column(target, overflow="fold", min_width=words)
        for recipe in recipes:
            table.add_row(
                identifier(recipe.name),
                identifier("\n".join(recipe.architectures or recipe.model_types)),
                *(_support_cell(recipe.targets.get(target)) for target in TARGET_NAMES),
            )
        return table
    # Narrow (COLUMNS=80): one cell names the targets, wrapped at spaces, never mid-word.
    table = ListingTable(title="lmi-build recipes (targets, with the quantization methods lmi-build applies)",
                         box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("recipe", style="bold", no_wrap=True, overflow="fold")
    table.add_column("architectures", no_wrap=True, overflow="fold")
    table.add_column("targets (quantization)", overflow="fold")
    for recipe in recipes:
        cells = []
        for target in TARGET_NAMES:
            support = recipe.targets.get(target)
            if support is not None:
                cells.append(f"{target} ({', '.join(support.quantize)})" if support.quantize else target)
        table.add_row(identifier(recipe.name), identifier("\n".join(recipe.architectures or recipe.model_types)),
                      "; ".join(cells) or "-")
    return table


def _show(recipe: Recipe) -> RenderableType:
    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True)
    head.add_column(overflow="fold")
    head.add_row("[bold]recipe[/bold]", f"{recipe.name} (version {recipe.version})")
    head.add_row("[bold]description[/bold]", recipe.description)
    head.add_row("[bold]architectures[/bold]", ", ".join(recipe.architectures) or "-")
    head.add_row("[bold]model types[/bold]", ", ".join(recipe.model_types) or "-")
    return Group(head, _targets_table(recipe), *(_version_option_table(option) for option in recipe.version_options))


# The rows of `recipes show`'s targets table: each a label and the TargetSupport field it shows.
_SUPPORT_ROWS = (("quantize", "quantize"), ("pre-quantized input", "prequantized"),
                 ("options allowed", "options_allowed"), ("options refused", "options_refused"),
                 ("defaults", "defaults"), ("ModelOpt decoder", "modelopt_decoder"),
                 ("TRT-LLM example", "trtllm_example"), ("TRT-LLM architecture", "trtllm_architecture"),
                 ("notes", "notes"))


def _support_fact(support: TargetSupport, field: str) -> str:
    """One field of a target's support as a cell: lists joined, a mapping as key=value, "-" when empty."""
    value = getattr(support, field)
    if isinstance(value, dict):
        value = [f"{k}={v}" for k, v in value.items()]
    return (value if isinstance(value, str | None) else ", ".join(value)) or "-"


def _targets_table(recipe: Recipe) -> Table:
    targets = Table(title="targets")
    targets.add_column("", no_wrap=True)
    for target in TARGET_NAMES:
        targets.add_column(target, overflow="fold")
    supports = [recipe.targets.get(t) for t in TARGET_NAMES]
    targets.add_row("supported", *("yes" if s is not None else "[dim]no[/dim]" for s in supports))
    for label, field in _SUPPORT_ROWS:
        targets.add_row(label, *(_support_fact(s, field) if s is not None else "" for s in supports))
    return targets


def _version_option_table(option: VersionOption) -> Table:
    table = Table(title=f"{option.key} ({', '.join(option.targets)}; "
                        f"{'required' if option.required else f'default {option.default}'})")
    table.add_column("value", no_wrap=True, overflow="fold")
    table.add_column("inferred when", overflow="fold")
    for rule in option.infer:
        conditions = [f"{k} = {v}" for k, v in rule.when.items()]
        conditions += [f"{k} contains '{v}'" for k, v in rule.contains.items()]
        conditions += [f"no {k}" for k in rule.absent]
        table.add_row(identifier(rule.value), ", ".join(conditions))
    table.caption = f"choices: {', '.join(option.choices)}; set with --option {option.name}=VALUE"
    return table
