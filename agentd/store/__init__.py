"""The store: the only part of agentd that speaks SQL.

``Store.open`` creates the SQLite file if needed, upgrades its schema to the
newest migration and loads sqlite-vec into every connection. Callers get
connections from :meth:`Store.read` (a plain transaction) or :meth:`Store.write`
(``BEGIN IMMEDIATE``: writers queue instead of failing) and hand them to the
repositories (``store.memories``, ``store.messages``, ``store.contexts``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError

from agentd._exceptions import EmbeddingMismatch, StoreError
from agentd.store import migrate, vectors
from agentd.store.engine import WRITE, create_engine, sqlite_path
from agentd.store.memories import Memory, MemoryRepo, NewMemory, content_hash
from agentd.store.schema import EmbeddingSpaceRow, table, utcnow

_SPACE = table(EmbeddingSpaceRow)


@dataclass(frozen=True)
class EmbeddingSpace:
    """The model and dimension of the vectors in the store."""

    model_id: str
    dimension: int


class Store:
    """An open agentd database."""

    def __init__(self, engine: sa.Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        #: Why the last write failed, until one succeeds again (``None``: writes work).
        self.write_failure: str | None = None
        self._writer = engine.execution_options(**{WRITE: True})
        self.memories = MemoryRepo()
        from agentd.store.contexts import ContextRepo
        from agentd.store.messages import MessageRepo

        self.messages = MessageRepo()
        self.contexts = ContextRepo()

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
            raise StoreError(f"cannot open the database at {path or url}: {exc.orig}") from exc
        return cls(engine, url)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A connection in a read transaction; a database failure is a :class:`StoreError`."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise StoreError(f"cannot read the database: {exc.orig}") from exc

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A connection in a write transaction (``BEGIN IMMEDIATE``), committed on exit.

        A failure of the database itself (disk full, I/O error, locked past the busy
        timeout) is a :class:`StoreError` and is remembered until a write succeeds
        again (:attr:`write_failure`, which ``/healthz`` reports).
        """
        try:
            with self._writer.begin() as conn:
                yield conn
        except OperationalError as exc:
            self.write_failure = str(exc.orig)
            raise StoreError(f"cannot write the database: {exc.orig}") from exc
        self.write_failure = None

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
            has_memories = conn.execute(sa.text("SELECT EXISTS (SELECT 1 FROM memories)")).scalar_one()
            if has_memories and vectors.table_dimension(conn) is not None:
                # Memories stored with no embedder configured have no vectors yet.
                count = conn.exec_driver_sql(f"SELECT count(*) FROM {vectors.TABLE}").scalar_one()
                if count:
                    raise EmbeddingMismatch("unknown", vectors.table_dimension(conn) or 0, model_id, dimension)
            if vectors.table_dimension(conn) != dimension:
                vectors.drop(conn)
                conn.exec_driver_sql(vectors.create_sql(dimension))
            conn.execute(sa.insert(_SPACE).values(id=1, model_id=model_id, dimension=dimension, updated_at=utcnow()))

    def rebind_embedding(self, conn: sa.Connection, model_id: str, dimension: int) -> None:
        """Inside a write transaction: empty the vector table and bind a new model."""
        vectors.drop(conn)
        conn.exec_driver_sql(vectors.create_sql(dimension))
        conn.execute(sa.delete(_SPACE))
        conn.execute(sa.insert(_SPACE).values(id=1, model_id=model_id, dimension=dimension, updated_at=utcnow()))


__all__ = ["EmbeddingSpace", "Memory", "NewMemory", "Store", "content_hash"]
