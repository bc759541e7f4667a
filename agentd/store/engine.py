"""The SQLAlchemy engine over an extension-capable SQLite driver.

This Python's ``sqlite3`` is built without ``enable_load_extension``, so agentd
hands SQLAlchemy the ``sqlean`` driver (same DB-API, SQLite 3.50, extensions
allowed) through ``module=`` and loads sqlite-vec into every new connection.

Every connection gets: a large page size (only effective before the first table
exists; sqlite-vec's chunked blobs read faster with it), WAL, a busy timeout,
foreign keys, and a memory map over the whole file. Transactions begin explicitly: readers with
``BEGIN`` (they never block writers in WAL), writers with ``BEGIN IMMEDIATE`` so
two writers queue on the busy timeout instead of deadlocking on a lock upgrade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
import sqlean
import sqlite_vec
from sqlalchemy import event
from sqlalchemy.engine import Engine

from agentd._exceptions import StoreError

#: Execution option that marks a connection as a writer (``BEGIN IMMEDIATE``).
WRITE = "agentd_write"

PRAGMAS = (
    "PRAGMA page_size = 65536",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA foreign_keys = ON",
    # Map the whole file: a million 384-d memories make a ~2 GB database, and
    # pages past the map are read through the 64 MB page cache instead (the
    # k-NN scans then spend most of their time copying). Address space, not
    # memory: the OS pages in what is read and may drop it again.
    "PRAGMA mmap_size = 68719476736",
    "PRAGMA cache_size = -65536",
    "PRAGMA temp_store = MEMORY",
)


def sqlite_path(url: str) -> Path | None:
    """The file behind a ``sqlite:///`` URL (``None`` for memory or other backends)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def create_engine(url: str, busy_timeout_ms: int = 5000) -> Engine:
    """An engine for ``url`` whose connections can run sqlite-vec and FTS5."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        raise StoreError(f"database.url {url!r}: only sqlite:/// URLs are supported")
    path = sqlite_path(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"database.url {url!r}: cannot create {path.parent}: {exc.strerror}") from exc
        if path.exists() and not path.is_file():
            raise StoreError(f"database.url {url!r}: {path} is not a file")
    engine = sa.create_engine(
        url,
        module=sqlean,
        connect_args={"timeout": busy_timeout_ms / 1000.0, "check_same_thread": False},
        pool_size=8,
        max_overflow=32,
        pool_timeout=60,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" hook below own transaction boundaries.
        dbapi_conn.isolation_level = None
        dbapi_conn.enable_load_extension(True)
        sqlite_vec.load(dbapi_conn)
        dbapi_conn.enable_load_extension(False)
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        for pragma in PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")
        except sa.exc.OperationalError as exc:
            if "locked" not in str(exc.orig):
                raise
            raise StoreError(
                f"the database {path or url} is locked by another writer (waited {busy_timeout_ms} ms, "
                "[database] busy_timeout_ms): let it finish or stop it, then try again"
            ) from exc

    return engine
