"""``lmi-build demo list``: the tiny models lmi-build generates itself (``--model demo:NAME``), so every
command can be tried offline, with no download and no token."""

import typer
from rich.table import Table

from lmi_build.cli.app import new_app
from lmi_build.reporting.output import current, identifier
from lmi_build.sources.demo import DEMO_MODELS, config_json

LIST_EPILOG = """[bold]Examples[/bold]

  lmi-build demo list

  lmi-build plan hf --model demo:tiny-mistral"""


def register(app: typer.Typer) -> None:
    demo_app = new_app(help="The demo models lmi-build generates itself (--model demo:NAME, offline).")
    demo_app.command("list", epilog=LIST_EPILOG)(list_demos)
    app.add_typer(demo_app, name="demo")


def list_demos() -> None:
    """List the demo models: what each stands for. Use them as --model demo:NAME."""
    rows = [{"model": f"demo:{name}", "architecture": (config_json(name).get("architectures") or ["?"])[0],
             "description": description} for name, description in DEMO_MODELS.items()]
    table = Table(title="demo models (generated on first use; no download)")
    table.add_column("--model", no_wrap=True)
    table.add_column("architecture", no_wrap=True)
    table.add_column("what it stands for")
    for row in rows:
        table.add_row(identifier(row["model"]), identifier(row["architecture"]), row["description"])
    current().result({"demo_models": rows}, table)
