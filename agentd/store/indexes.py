"""The two search indexes of memories, as protocols each backend implements.

A :class:`VectorIndex` holds one embedding per memory and answers k-nearest
queries within a persona and a set of scopes; a :class:`TextIndex` holds each
memory's words (its text, and its ``metadata["context"]``, weighted below the
text) and answers bm25-ranked queries within the same reach. SQLite implements
them with sqlite-vec and FTS5 (:mod:`agentd.store.vectors`,
:mod:`agentd.store.lexical`), PostgreSQL with pgvector and its full-text search
(:mod:`agentd.store.pgvectors`, :mod:`agentd.store.pgtext`). Both sides return
the same units: cosine similarity, and bm25 (higher is better) computed with
FTS5's formula, so fusion weights carry over between backends.

Every method runs inside the caller's transaction (``Store.read``/``Store.write``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import sqlalchemy as sa

if TYPE_CHECKING:
    import numpy as np

#: ``(memory_id, persona, scope, vector)``.
VectorRow = tuple[int, str, str, "np.ndarray"]
#: ``(memory_id, persona, scope, text, context)``.
WordsRow = tuple[int, str, str, str, str]


class VectorIndex(Protocol):
    """Embeddings of memories, searched by cosine similarity within a reach."""

    def dimension(self, conn: sa.Connection) -> int | None:
        """The dimension the index holds (``None`` if it has no table)."""

    def reset(self, conn: sa.Connection, dimension: int) -> None:
        """Empty the index and size it for ``dimension``-d vectors."""

    def insert(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        """Add one vector per memory."""

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        """Remove one memory's vector."""

    def count(self, conn: sa.Connection) -> int:
        """How many vectors the index holds."""

    def nearest(
        self, conn: sa.Connection, vector: np.ndarray, persona: str, scopes: Sequence[str], k: int, exact: bool = False
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest ``(memory_id, cosine)`` in persona ∩ scopes (empty: every scope), best first.

        ``exact`` forces a brute-force scan where the index would otherwise
        approximate (large persona-wide searches).
        """

    def fetch(self, conn: sa.Connection, ids: Sequence[int]) -> list[VectorRow]:
        """The stored vectors of ``ids`` (those that have one; copying a store)."""

    def missing(self, conn: sa.Connection) -> list[int]:
        """Ids of memories that have no vector."""

    def invalid(self, conn: sa.Connection, dimension: int) -> list[int]:
        """Ids of stored vectors that are not finite unit vectors of ``dimension`` (reads every vector)."""

    def begin_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        """Start staging a new set of ``dimension``-d vectors beside the live ones."""

    def insert_staged(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        """Add vectors to the staged set."""

    def finish_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        """Replace the live vectors with the staged ones (of memories that still exist)."""

    def begin_bulk(self, conn: sa.Connection) -> None:
        """A large fill follows in this transaction: stop keeping a search structure up row by row
        (PostgreSQL drops its HNSW graph; readers of the vectors wait for the transaction's end)."""

    def finish_bulk(self, conn: sa.Connection) -> None:
        """The fill is done: build the search structure once over every vector."""


class TextIndex(Protocol):
    """The words of memories, searched by bm25 within a reach."""

    def insert(self, conn: sa.Connection, rows: Iterable[WordsRow]) -> None:
        """Index memories' text and context."""

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        """Remove one memory from the index."""

    def count(self, conn: sa.Connection) -> int:
        """How many memories the index holds."""

    def purge(self, conn: sa.Connection) -> None:
        """Rewrite the index's storage without what deleted entries left in it (a person's data
        erased: their words must not stay behind as tombstoned terms)."""

    def search(
        self, conn: sa.Connection, terms: Sequence[str], persona: str, scopes: Sequence[str], k: int
    ) -> list[tuple[int, float]]:
        """The ``k`` best ``(memory_id, bm25)`` for any of ``terms`` in persona ∩ scopes (empty: every scope)."""
