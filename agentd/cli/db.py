"""``agentd db …``: the database schema, copying a store between backends, backups and restores."""

from __future__ import annotations

import socket
from pathlib import Path

import click
import sqlalchemy as sa

from agentd._exceptions import StoreError
from agentd.app import App
from agentd.cli.main import pass_app
from agentd.cli.output import out, print_json, progress_bar
from agentd.store import Store, migrate
from agentd.store.engine import backend, create_engine, sqlite_path


@click.group()
def db() -> None:
    """The database: schema migrations, copying a store to another backend, backups."""


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


def _size(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:,.1f} {unit}"


@db.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--pg-dump", "pg_dump", default="pg_dump", show_default=True, help="PostgreSQL: the pg_dump to run.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def backup(app: App, path: str, pg_dump: str, as_json: bool) -> None:
    """Copy the database to PATH (a new file) while the daemon serves, and check the copy.

    \b
    SQLite: SQLite's online backup API, in one consistent snapshot; the copy is
    checked (integrity_check, schema revision, rows of each kind). PostgreSQL:
    pg_dump --format=custom, checked with pg_restore --list (restore it with
    pg_restore into an empty database). Prints the copy's size.
    """
    from agentd.store.backup import backup_postgres, backup_sqlite

    url = app.config.database_url
    target = Path(path).expanduser().resolve()
    if backend(url) == "postgresql":
        checked = backup_postgres(url, target, pg_dump)
    else:
        source = sqlite_path(url)
        if source is None or not source.is_file():
            raise StoreError(f"there is no database file at {url} to back up")
        checked = backup_sqlite(source, target, migrate.known_revisions())
    if as_json:
        print_json({"path": str(checked.path), "size": checked.size, "revision": checked.revision, **checked.counts})
        return
    rows = ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in checked.counts.items())
    out.print(f"backed up {_shown(url)} to {checked.path}: {_size(checked.size)} ({checked.size:,} bytes), checked")
    out.print(f"it holds {rows}")


def _daemon_answers(host: str, port: int) -> bool:
    """Whether something accepts connections where the config says the daemon listens."""
    if not port:
        return False
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


@db.command()
@click.argument("path", type=click.Path(dir_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def restore(app: App, path: str, as_json: bool) -> None:
    """Replace the database with the backup at PATH, after checking it; stop the daemon first.

    \b
    The backup is refused, and nothing changed, if it is not a SQLite database,
    is truncated or damaged (integrity_check), or was written by a newer agentd
    (a schema revision this one does not know). The replaced database is kept
    as <database>.before-restore. PostgreSQL: use pg_restore (docs/guides/backup.md).
    """
    from agentd.store.backup import restore_sqlite

    url = app.config.database_url
    database = sqlite_path(url)
    if backend(url) == "postgresql" or database is None:
        raise StoreError(
            "agentd db restore restores SQLite files; on PostgreSQL restore a pg_dump archive with "
            "pg_restore --dbname=URL into an empty database (docs/guides/backup.md)"
        )
    daemon = app.config.daemon
    if _daemon_answers(daemon.host, daemon.port):
        raise StoreError(f"a daemon is listening on {daemon.host}:{daemon.port}: stop it before restoring")
    checked, kept = restore_sqlite(Path(path).expanduser().resolve(), database, migrate.known_revisions())
    if as_json:
        print_json({"database": str(database), "kept": str(kept) if kept else None, **checked.counts})
        return
    rows = ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in checked.counts.items())
    out.print(f"restored {database} from {path} (revision {checked.revision}; {rows})")
    if kept is not None:
        out.print(f"the database it replaced is kept as {kept}")
