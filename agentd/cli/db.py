"""``agentd db …``: the database schema."""

from __future__ import annotations

import click

from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json
from agentd.store import migrate
from agentd.store.engine import create_engine


@click.group()
def db() -> None:
    """The database: schema migrations."""


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def upgrade(app: App, as_json: bool) -> None:
    """Create the database if needed and apply every pending migration."""
    engine = create_engine(app.config.database_url, app.config.database.busy_timeout_ms)
    try:
        dim = app.embedder.dimension if app.embedder is not None else 384
        before, after = migrate.upgrade(engine, dim)
    finally:
        engine.dispose()
    if as_json:
        print_json({"database": app.config.database_url, "from": before, "to": after})
    elif before == after:
        out.print(f"database is at the newest revision ({after}): {app.config.database_url}")
    else:
        out.print(f"upgraded {app.config.database_url} from {before or 'empty'} to {after}")
