"""``agentd personas``: the personas and their models."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.table import Table

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def personas(app: App, as_json: bool) -> None:
    """List the personas with their model and context window."""
    rows = app.describe_personas()
    if as_json:
        print_json([asdict(r) for r in rows])
        return
    table = Table("name", "model", "context window", "output reserve", "channels", "skills", "description")
    for r in rows:
        table.add_row(
            r.name,
            r.model,
            f"{r.context_window:,} ({r.window_source})",
            f"{r.output_reserve:,}",
            ", ".join(r.channels) or "-",
            ", ".join(r.skills),
            r.description,
        )
    out.print(table)
