"""``agentd db …``: the database schema, and copying a store between backends."""

from __future__ import annotations

import click
import sqlalchemy as sa

from agentd._exceptions import StoreError
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json, progress_bar
from agentd.store import Store, migrate
from agentd.store.engine import create_engine


@click.group()
def db() -> None:
    """The database: schema migrations, copying a store to another backend."""


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


@db.command()
@click.argument("source_url")
@click.argument("destination_url")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def copy(source_url: str, destination_url: str, as_json: bool) -> None:
    """Copy a whole store into a new, empty one: SQLite to PostgreSQL or back.

    \b
    Memories, vectors, messages, channels, context records and the embedding
    space; ids are kept. Both are upgraded to the newest revision first. Stop
    the daemons that write to SOURCE_URL before copying. Example:
      agentd db copy sqlite:///agentd.db postgresql+psycopg://agentd@db.internal/agentd
    """
    from agentd.store.copy import copy_store

    source = Store.open(source_url)
    try:
        space = source.embedding_space()
        destination = Store.open(destination_url, dimension=space.dimension if space else 384)
        try:
            with progress_bar("copying") as update:
                report = copy_store(source, destination, update)
        finally:
            destination.close()
    finally:
        source.close()
    if as_json:
        print_json({"source": report.source, "destination": report.destination, "matches": report.matches})
    else:
        for name, count in report.source.items():
            mark = "ok" if report.destination[name] == count else f"MISMATCH: {report.destination[name]} copied"
            out.print(f"{name:<16} {count:>10,}  {mark}")
    if not report.matches:
        raise StoreError("the copy's counts differ from the source's (see above)")
    if not as_json:
        out.print(f"copied {_shown(source_url)} to {_shown(destination_url)}")


def _shown(url: str) -> str:
    return sa.engine.make_url(url).render_as_string(hide_password=True)
