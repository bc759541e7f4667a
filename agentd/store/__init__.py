"""The store: the only part of agentd that speaks SQL.

``Store.open`` creates the database if needed (a SQLite file, or the schema in
an existing PostgreSQL database) and upgrades it to the newest migration.
Callers get connections from :meth:`Store.read` (a plain transaction) or
:meth:`Store.write` (on SQLite ``BEGIN IMMEDIATE``: writers queue instead of
failing) and hand them to the repositories (``store.memories``,
``store.messages``, ``store.contexts``). The memories' two search indexes are
``store.vectors`` and ``store.words`` (:mod:`agentd.store.indexes`): sqlite-vec
and FTS5 on SQLite, pgvector and PostgreSQL full-text search on PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError

from agentd._exceptions import EmbeddingMismatch, StoreError
from agentd.store import migrate, schema
from agentd.store.capabilities import Capabilities, capabilities_of
from agentd.store.engine import WRITE, backend, create_engine, sqlite_path
from agentd.store.indexes import TextIndex, VectorIndex
from agentd.store.memories import Memory, MemoryRepo, NewMemory, content_hash
from agentd.store.people import Erased
from agentd.store.schema import utcnow
from agentd.store.writers import WriteTurns

_SPACE = schema.embedding_space


@dataclass(frozen=True)
class EmbeddingSpace:
    """The model and dimension of the vectors in the store."""

    model_id: str
    dimension: int


class Store:
    """An open agentd database."""

    def __init__(self, engine: sa.Engine, url: str, busy_timeout_ms: int = 5000) -> None:
        self.engine = engine
        self.url = url
        self._busy_timeout = busy_timeout_ms / 1000.0
        # SQLite has one writer at a time: its writers take turns (agentd.store.writers).
        self._turns = WriteTurns(sqlite_path(url)) if backend(engine) == "sqlite" else None
        #: Why the last write failed, until one succeeds again (``None``: writes work).
        self.write_failure: str | None = None
        #: The read transaction of a thread's :meth:`snapshot`.
        self._snapshot = threading.local()
        self._writer = engine.execution_options(**{WRITE: True})
        self.vectors, self.words = indexes(engine)
        self.memories = MemoryRepo(self.vectors, self.words)
        from agentd.store.contexts import ContextRepo
        from agentd.store.jobs import CursorRepo, MemoryHistoryRepo
        from agentd.store.keys import KeyRepo
        from agentd.store.messages import MessageRepo
        from agentd.store.schedules import ScheduleRepo
        from agentd.store.spend import SpendRepo
        from agentd.store.tools import ApprovalRepo, ToolCallRepo

        self.messages = MessageRepo()
        self.contexts = ContextRepo()
        self.cursors = CursorRepo()
        self.memory_history = MemoryHistoryRepo()
        self.keys = KeyRepo()
        self.approvals = ApprovalRepo()
        self.tool_calls = ToolCallRepo()
        #: Tokens spent per UTC day, persona, user and model (the spend caps').
        self.spend = SpendRepo()
        self.schedules = ScheduleRepo()

    @classmethod
    def open(cls, url: str, busy_timeout_ms: int = 5000, dimension: int = 384) -> Store:
        """Open (creating and upgrading as needed) the database at ``url``.

        ``dimension`` sizes the vector table when the database is new.
        """
        engine = create_engine(url, busy_timeout_ms)
        try:
            migrate.upgrade(engine, dimension)
        except DBAPIError as exc:
            engine.dispose()
            path = sqlite_path(url)
            where = path or sa.engine.make_url(url).render_as_string(hide_password=True)
            raise StoreError(f"cannot open the database at {where}: {exc.orig}") from exc
        # Connections opened before the migration created pgvector's type have no adapter for it.
        engine.dispose()
        return cls(engine, url, busy_timeout_ms)

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"`` (outside store/, ask :attr:`capabilities` instead)."""
        return backend(self.engine)

    @property
    def capabilities(self) -> Capabilities:
        """What this store's backend can do (shared by daemons, advisory locks, ...)."""
        return capabilities_of(self.backend)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self._turns is not None:
            self._turns.close()

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A connection in a read transaction; a database failure is a :class:`StoreError`.

        Inside :meth:`snapshot` on the same thread, the snapshot's transaction.
        """
        shared = getattr(self._snapshot, "conn", None)
        if shared is not None:
            yield shared
            return
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise StoreError(f"cannot read the database: {exc.orig}") from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every :meth:`read` of this thread inside it shares one read transaction: one consistent
        view of the store, and one transaction where a turn's preparation opened several. A write
        made inside it (:meth:`write`, its own transaction) is not seen by its reads."""
        if getattr(self._snapshot, "conn", None) is not None:
            yield  # already inside one
            return
        with self.read() as conn:
            self._snapshot.conn = conn
            try:
                yield
            finally:
                self._snapshot.conn = None

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A connection in a write transaction (``BEGIN IMMEDIATE``), committed on exit.

        A failure of the database itself (disk full, I/O error, locked past the busy
        timeout) is a :class:`StoreError` and is remembered until a write succeeds
        again (:attr:`write_failure`, which ``/healthz`` reports). On SQLite this
        process's writers take turns on a lock first, waiting at most the busy timeout.
        """
        turns = self._turns
        if turns is not None and not turns.acquire(self._busy_timeout):
            whose = "another write of this daemon" if turns.shared else "another write of this process"
            raise StoreError(
                f"cannot write the database: {whose} held it for longer than "
                f"{self._busy_timeout:g} s ([database] busy_timeout_ms)"
            )
        try:
            with self._writer.begin() as conn:
                yield conn
        except OperationalError as exc:
            self.write_failure = str(exc.orig)
            raise StoreError(f"cannot write the database: {exc.orig}") from exc
        except StoreError as exc:
            if isinstance(exc.__cause__, OperationalError):  # the write lock, past the busy timeout
                self.write_failure = exc.message
            raise
        finally:
            if turns is not None:
                turns.release()
        self.write_failure = None

    def share_writes(self) -> None:
        """Take turns at writing with the other processes of this daemon (its worker processes,
        :mod:`agentd.runtime.scaleout.workers`) instead of meeting SQLite's busy timeout (SQLite only)."""
        if self._turns is not None:
            self._turns.share()

    # -- a person's data -------------------------------------------------------

    def export_user(self, user: str, persona: str | None = None) -> dict[str, Any]:
        """Everything kept about ``user`` (of ``persona`` only, when given): :func:`agentd.store.people.export`."""
        from agentd.store import people

        with self.read() as conn:
            return people.export(conn, user, persona)

    def forget_user(self, user: str, persona: str | None = None) -> Erased:
        """Erase everything kept about ``user`` in one transaction (:func:`agentd.store.people.forget`),
        and on SQLite leave none of its bytes in the database files: deleted content is overwritten
        with zeros (``secure_delete``, on for every connection), the full-text index is rewritten
        without it, and the WAL (which holds the pages as they were) is checkpointed and truncated.
        The files are then searched for the erased texts (:mod:`agentd.store.erasure`); a copy left
        (by a file written before ``secure_delete`` was on) makes the database be rebuilt (``VACUUM``)
        and checkpointed again. ``Erased.remaining`` counts what is still found, ``wal_kept`` says
        a reader kept the WAL from being truncated; on PostgreSQL ``until_vacuum`` says what
        the server keeps until its own vacuum."""
        from agentd.store import erasure, people

        with self.write() as conn:
            erased = people.forget(conn, self.vectors, self.words, user, persona)
            if erased.total:
                self.words.purge(conn)
        path = sqlite_path(self.url)
        if self.backend != "sqlite":
            erased.until_vacuum = erasure.POSTGRES_REMAINS if erased.total else None
        elif path is not None:
            found = erasure.needles(erased.texts, people.MIN_QUOTE)
            erased.wal_kept = not self.checkpoint()
            erased.remaining = erasure.copies(path, found)
            if erased.remaining:
                erasure.vacuum(self.engine)
                erased.vacuumed = True
                erased.wal_kept = not self.checkpoint()
                erased.remaining = erasure.copies(path, found)
        return erased

    def checkpoint(self, wait: float | None = None) -> bool:
        """SQLite: copy the WAL into the database file and truncate it to nothing (``wal_checkpoint(TRUNCATE)``),
        waiting up to ``wait`` seconds (default the busy timeout) for readers; False when a reader
        still held it. True on PostgreSQL."""
        if self.backend != "sqlite":
            return True
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            busy = 1
            deadline = time.monotonic() + (self._busy_timeout if wait is None else wait)
            while busy and time.monotonic() < deadline:
                busy = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            cursor.close()
        finally:
            raw.close()
        return not busy

    # -- the embedding space -------------------------------------------------

    def embedding_space(self) -> EmbeddingSpace | None:
        """The model whose vectors the store holds, if any was bound."""
        with self.read() as conn:
            row = conn.execute(sa.select(_SPACE).where(_SPACE.c.id == 1)).first()
        return None if row is None else EmbeddingSpace(row.model_id, row.dimension)

    def bind_embedding(self, model_id: str, dimension: int) -> None:
        """Check that ``model_id`` is the store's model, or bind it to a new store.

        Raises :class:`EmbeddingMismatch` when the store already holds vectors of
        another model (see ``agentd memory reembed``).
        """
        with self.write() as conn:
            row = conn.execute(sa.select(_SPACE).where(_SPACE.c.id == 1)).first()
            if row is not None:
                if row.model_id != model_id or row.dimension != dimension:
                    raise EmbeddingMismatch(row.model_id, row.dimension, model_id, dimension)
                return
            held = self.vectors.dimension(conn)
            # Memories stored with no embedder configured have no vectors yet.
            if held is not None and self.vectors.count(conn):
                raise EmbeddingMismatch("unknown", held, model_id, dimension)
            if held != dimension:
                self.vectors.reset(conn, dimension)
            conn.execute(sa.insert(_SPACE).values(id=1, model_id=model_id, dimension=dimension, updated_at=utcnow()))

    def rebind_embedding(self, conn: sa.Connection, model_id: str, dimension: int) -> None:
        """Inside a write transaction: the staged vectors (``store.vectors.begin_rebuild``) replace the
        live ones, and the store is bound to ``model_id``."""
        self.vectors.finish_rebuild(conn, dimension)
        conn.execute(sa.delete(_SPACE))
        conn.execute(sa.insert(_SPACE).values(id=1, model_id=model_id, dimension=dimension, updated_at=utcnow()))


def indexes(engine: sa.Engine) -> tuple[VectorIndex, TextIndex]:
    """The vector and text index of ``engine``'s backend."""
    if backend(engine) == "postgresql":
        from agentd.store.pgtext import PgText
        from agentd.store.pgvectors import PgVectors

        return PgVectors(), PgText()
    from agentd.store.lexical import SqliteText
    from agentd.store.vectors import SqliteVectors

    return SqliteVectors(), SqliteText()


__all__ = ["Capabilities", "EmbeddingSpace", "Memory", "NewMemory", "Store", "TextIndex", "VectorIndex", "content_hash"]
