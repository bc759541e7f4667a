"""The sqlite-vec table ``memory_vectors``: one vector per memory, rowid = memory id.

persona and scope are vec0 *partition keys*, so a scoped k-NN query reads only
that (persona, scope)'s chunks. sqlite-vec 0.1.9 silently returns unmerged
per-partition results for ``IN``/``OR`` on partition keys, so a search over
several scopes runs one query per scope and merges here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import sqlalchemy as sa

TABLE = "memory_vectors"
#: Vectors per chunk. Small, because most (persona, scope) partitions are small
#: and a k-NN query reads whole chunks (bench/search.py measures this).
CHUNK_SIZE = 128


def create_sql(dimension: int, table: str = TABLE) -> str:
    """DDL of the vector table for ``dimension``-d vectors under cosine distance."""
    return (
        f"CREATE VIRTUAL TABLE {table} USING vec0("
        "persona TEXT PARTITION KEY, scope TEXT PARTITION KEY, "
        f"embedding FLOAT[{int(dimension)}] distance_metric=cosine, chunk_size={CHUNK_SIZE})"
    )


def table_dimension(conn: sa.Connection, table: str = TABLE) -> int | None:
    """The dimension the existing table was created with (``None`` if it does not exist)."""
    row = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if row is None:
        return None
    sql = row[0].upper()
    start = sql.index("FLOAT[") + len("FLOAT[")
    return int(sql[start : sql.index("]", start)])


def drop(conn: sa.Connection, table: str = TABLE) -> None:
    """Drop the vector table if it exists."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def insert(conn: sa.Connection, rows: Iterable[tuple[int, str, str, np.ndarray]], table: str = TABLE) -> None:
    """Insert ``(memory_id, persona, scope, vector)`` rows."""
    params = [(mid, persona, scope, np.asarray(vec, dtype=np.float32).tobytes()) for mid, persona, scope, vec in rows]
    if params:
        conn.exec_driver_sql(
            f"INSERT INTO {table}(rowid, persona, scope, embedding) VALUES (?, ?, ?, ?)", params
        )


def delete(conn: sa.Connection, memory_id: int) -> None:
    """Remove one memory's vector."""
    conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE rowid = ?", (memory_id,))


def nearest(
    conn: sa.Connection, vector: np.ndarray, persona: str, scopes: Sequence[str], k: int
) -> list[tuple[int, float]]:
    """The ``k`` nearest ``(memory_id, cosine_similarity)`` in persona ∩ scopes, best first.

    ``scopes`` empty means every scope of the persona.
    """
    blob = np.asarray(vector, dtype=np.float32).tobytes()
    found: list[tuple[int, float]] = []
    if not scopes:
        rows = conn.exec_driver_sql(
            f"SELECT rowid, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ? AND persona = ?",
            (blob, k, persona),
        ).fetchall()
        found.extend(rows)
    else:
        for scope in scopes:
            rows = conn.exec_driver_sql(
                f"SELECT rowid, distance FROM {TABLE} "
                "WHERE embedding MATCH ? AND k = ? AND persona = ? AND scope = ?",
                (blob, k, persona, scope),
            ).fetchall()
            found.extend(rows)
    found.sort(key=lambda r: (r[1], r[0]))
    return [(int(mid), 1.0 - float(dist)) for mid, dist in found[:k]]
