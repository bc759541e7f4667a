"""A large fill of a store in one transaction, for benchmarks and the tests of the vector index.

agentd itself never fills a store in bulk (memories arrive a turn at a time, ``agentd db copy``
copies vectors with their rows), so this is not part of :class:`agentd.store.Store`: it reaches
the vector index's own ``begin_bulk``/``finish_bulk`` (:class:`agentd.store.indexes.VectorIndex`)
inside one of the store's write transactions. ``bench/search.py`` fills a million memories with it;
tests/test_vector_scale.py checks what it leaves behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from agentd.store import Store


@contextmanager
def bulk(store: Store) -> Iterator[sa.Connection]:
    """One write transaction for a large fill: add with ``store.memories.add`` as usual, while the
    vector index builds its search structure once at the end instead of row by row (PostgreSQL's
    HNSW graph: dropped at the start, built over every vector at the end, with the memory to hold
    it; until the commit, other readers of the vectors wait). A failure rolls it all back, the
    graph included. On SQLite it is a plain write."""
    with store.write() as conn:
        store.vectors.begin_bulk(conn)
        yield conn
        store.vectors.finish_bulk(conn)
        if store.backend == "postgresql":  # the planner's statistics, for the tables just filled
            conn.exec_driver_sql("ANALYZE memories, memory_vectors, memory_words")
