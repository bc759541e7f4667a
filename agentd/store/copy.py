"""Copying a whole store to another backend (``agentd db copy``): SQLite to PostgreSQL and back.

Rows keep their ids (messages, memories and context records point at each
other by id). Channels, messages, memories, context records and the
embedding space are copied table by table in id order; vectors are read from
the source's vector index and bulk-loaded into the destination's (HNSW or
sqlite-vec's bit table built once at the end); words are indexed again from
each memory's text and context, as the destination's text index does it.
Everything is written in one destination transaction, so a failed copy leaves
the destination empty. Stop daemons writing to the source first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agentd._exceptions import StoreError
from agentd.store import Store
from agentd.store.lexical import context_of
from agentd.store.schema import (
    api_keys,
    channels,
    context_records,
    job_cursors,
    memories,
    memory_history,
    messages,
)

#: Rows read and written per batch.
BATCH = 1000
#: Tables copied row for row, in an order that satisfies their references; the key pages through them.
#: ``None``: a small table read in one go (background jobs' cursors: one row per job and channel).
TABLES: tuple[tuple[sa.Table, str | None], ...] = (
    (channels, "name"),
    (messages, "id"),
    (memories, "id"),
    (context_records, "id"),
    (job_cursors, None),
    (memory_history, "id"),
    (api_keys, "id"),
)
#: Tables whose ids come from a sequence on PostgreSQL (moved past the copied ids).
_SEQUENCED = ("messages", "memories", "context_records", "memory_history", "api_keys")


@dataclass(frozen=True)
class CopyReport:
    """How many of each kind the source held and the destination holds after the copy."""

    source: dict[str, int]
    destination: dict[str, int]

    @property
    def matches(self) -> bool:
        """True when every count is the same on both sides."""
        return self.source == self.destination


def counts(store: Store) -> dict[str, int]:
    """Rows of each copied kind in ``store``."""
    with store.read() as conn:
        found = {
            table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
            for table, _ in TABLES
        }
        found["vectors"] = store.vectors.count(conn)
        found["words"] = store.words.count(conn)
        found["embedding_space"] = 0 if store.embedding_space() is None else 1
    return found


def _pages(store: Store, table: sa.Table, key: str | None) -> Iterator[list[dict[str, Any]]]:
    if key is None:
        with store.read() as conn:
            rows = [dict(r._mapping) for r in conn.execute(sa.select(table))]
        if rows:
            yield rows
        return
    column = table.c[key]
    last: Any = None
    while True:
        query = sa.select(table).order_by(column).limit(BATCH)
        if last is not None:
            query = query.where(column > last)
        with store.read() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        if not rows:
            return
        yield rows
        last = rows[-1][key]


def copy_store(source: Store, destination: Store, progress: Callable[[int, int], None]) -> CopyReport:
    """Copy everything in ``source`` into the empty ``destination``; ``progress(done, total)`` as rows land."""
    before = counts(source)
    held = counts(destination)
    if any(held[name] for name in ("channels", "messages", "memories", "context_records", "vectors", "words")):
        raise StoreError(f"the destination {destination.url!r} is not empty; copy into a new database")
    space = source.embedding_space()
    total = sum(before[table.name] for table, _ in TABLES) + before["vectors"]
    done = 0
    progress(done, total)
    if space is not None:
        destination.bind_embedding(space.model_id, space.dimension)
    with destination.write() as out:
        dimension = destination.vectors.dimension(out) or (space.dimension if space else None)
        if dimension is not None:
            destination.vectors.begin_rebuild(out, dimension)
        for table, key in TABLES:
            for rows in _pages(source, table, key):
                out.execute(sa.insert(table), rows)
                if table.name == "memories":
                    destination.words.insert(
                        out, [(r["id"], r["persona"], r["scope"], r["text"], context_of(r["metadata"])) for r in rows]
                    )
                    if dimension is not None:
                        with source.read() as conn:
                            vecs = source.vectors.fetch(conn, [r["id"] for r in rows])
                        destination.vectors.insert_staged(out, vecs)
                        done += len(vecs)
                done += len(rows)
                progress(done, total)
        if dimension is not None:
            destination.vectors.finish_rebuild(out, dimension)
        if destination.backend == "postgresql":
            for name in _SEQUENCED:
                out.exec_driver_sql(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                    f"coalesce((SELECT max(id) FROM {name}), 0) + 1, false)"
                )
    return CopyReport(before, counts(destination))
