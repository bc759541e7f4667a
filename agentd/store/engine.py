"""The SQLAlchemy engine: SQLite (the default) or PostgreSQL, and how connections are set up.

Every connection agentd opens is made here, so what a backend needs on each
connection (sqlite-vec, pragmas, pgvector's type adapters, timeouts) lives in
one place. :func:`backend` tells the two apart.

**SQLite.** This Python's ``sqlite3`` is built without ``enable_load_extension``, so agentd
hands SQLAlchemy the ``sqlean`` driver (same DB-API, SQLite 3.50, extensions
allowed) through ``module=`` and loads sqlite-vec into every new connection. The
extension is loaded from its file in the ``sqlite_vec`` package (:func:`vec0_path`),
without importing that package: its ``__init__`` imports numpy, which a command that
handles no vector (``agentd memory list``) should not pay for.

Every connection gets: a large page size (only effective before the first table
exists; sqlite-vec's chunked blobs read faster with it), WAL, a busy timeout,
foreign keys, and a memory map over the whole file. Transactions begin explicitly: readers with
``BEGIN`` (they never block writers in WAL), writers with ``BEGIN IMMEDIATE`` so
two writers queue on the busy timeout instead of deadlocking on a lock upgrade.

**PostgreSQL** (``postgresql+psycopg://…``; needs ``pip install 'agentd[postgres]'``):
psycopg 3 with pgvector's adapters (vectors travel as numpy arrays),
``lock_timeout`` set to the busy timeout, every statement bounded by
:data:`STATEMENT_TIMEOUT_MS`, connections checked before use. Writers begin
like readers (READ COMMITTED); the repositories use ``ON CONFLICT`` where two
writers could race.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import sqlean
from sqlalchemy import event
from sqlalchemy.engine import Engine

from agentd._exceptions import StoreError

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

#: Execution option that marks a connection as a writer (``BEGIN IMMEDIATE``).
WRITE = "agentd_write"
#: PostgreSQL: the longest one statement may run (maintenance such as an HNSW build sets its own).
STATEMENT_TIMEOUT_MS = 120_000
#: SQLite: connections kept open (as many again may be opened for a moment).
SQLITE_POOL = 64
#: PostgreSQL: seconds to wait for a connection to the server.
CONNECT_TIMEOUT_S = 10

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
    # Freed space is overwritten with zeros on every connection, from the start: deleted rows,
    # cells moved away by a page split and pages put on the free list keep no copy of their text
    # (``agentd user forget`` must leave no byte of a person behind; docs/guides/privacy.md).
    "PRAGMA secure_delete = ON",
    # SQLite's own (passive) checkpoint after 16 MiB of WAL rather than 1000 pages (64 MiB at this
    # page size), and a WAL that is started again cut back to 16 MiB (agentd.store.walkeeper).
    "PRAGMA wal_autocheckpoint = 256",
    "PRAGMA journal_size_limit = 16777216",
)


@functools.cache
def vec0_path() -> str:
    """The sqlite-vec extension's file, as ``sqlite_vec.loadable_path()`` gives it (found without
    importing the package, whose ``__init__`` imports numpy)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the sqlite-vec package is not installed (pip install sqlite-vec)")
    return str(Path(next(iter(spec.submodule_search_locations)), "vec0"))


def sqlite_path(url: str) -> Path | None:
    """The file behind a ``sqlite:///`` URL (``None`` for memory or other backends)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def backend(url_or_engine: str | Engine | sa.Connection) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    if isinstance(url_or_engine, str):
        return sa.engine.make_url(url_or_engine).get_backend_name()
    return url_or_engine.dialect.name


def insert_for(conn: sa.Connection) -> Callable[[sa.Table], PgInsert | SqliteInsert]:
    """The backend's own INSERT (it has ``ON CONFLICT``). PostgreSQL's dialect module is imported
    only for a PostgreSQL connection: importing it costs a SQLite command 50 ms."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def driver_sql(conn: sa.Connection, sql: str) -> str:
    """``sql`` written with ``?`` placeholders, in the connection's driver's own style."""
    return sql if conn.dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def create_engine(url: str, busy_timeout_ms: int = 5000) -> Engine:
    """An engine for ``url``: SQLite with sqlite-vec and FTS5, or PostgreSQL with pgvector."""
    parsed = sa.engine.make_url(url)
    name = parsed.get_backend_name()
    if name == "postgresql":
        return _postgres_engine(parsed, busy_timeout_ms)
    if name != "sqlite":
        raise StoreError(f"database.url {url!r}: use sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE")
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
        # The daemon's actors, retrieval workers and request threads each hold a connection for
        # a moment; a connection beyond the pool is closed after use, and the next one pays for
        # opening it again (sqlite-vec, pragmas, the memory map). A kept SQLite connection costs little.
        pool_size=SQLITE_POOL,
        max_overflow=SQLITE_POOL,
        pool_timeout=60,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" hook below own transaction boundaries.
        dbapi_conn.isolation_level = None
        dbapi_conn.enable_load_extension(True)
        dbapi_conn.load_extension(vec0_path())
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


def _postgres_engine(parsed: sa.URL, busy_timeout_ms: int) -> Engine:
    if parsed.get_driver_name() not in ("psycopg", "postgresql"):  # "postgresql://" means the default driver
        raise StoreError(
            f"database.url: the PostgreSQL driver is psycopg (postgresql+psycopg://…), not {parsed.drivername}"
        )
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as exc:
        raise StoreError("PostgreSQL needs psycopg and pgvector: pip install 'agentd[postgres]'") from exc
    options = f"-c lock_timeout={int(busy_timeout_ms)} -c statement_timeout={STATEMENT_TIMEOUT_MS}"
    engine = sa.create_engine(
        parsed.set(drivername="postgresql+psycopg"),
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "options": options},
        pool_size=8,
        max_overflow=32,
        pool_timeout=60,
        pool_pre_ping=True,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # A new database has no vector type until migration 0001 creates the
        # extension; Store.open renews the pool after migrating.
        try:
            register_vector(dbapi_conn)
        except psycopg.ProgrammingError:
            dbapi_conn.rollback()
        else:
            dbapi_conn.commit()

    return engine
