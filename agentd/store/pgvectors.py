"""pgvector: one ``vector(d)`` per memory in ``memory_vectors``, cosine distance.

A search within scopes is exact: the btree on (persona, scope) finds the
reach's rows and each is compared (``ORDER BY (embedding <=> q) + 0`` keeps the
planner off the HNSW index, whose filtered scans may return fewer than k). A
persona-wide search over more than :data:`EXACT_LIMIT` vectors goes through the
HNSW index (``vector_cosine_ops``) with pgvector's iterative scan, so the
persona filter still yields k rows; ``bench/search.py --store postgres``
prints its recall against the exact scan. Smaller personas stay exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import sqlalchemy as sa

from agentd.store.indexes import VectorRow

TABLE = "memory_vectors"
STAGING = TABLE + "_next"
HNSW = "memory_vectors_hnsw"
#: Persona-wide searches over at most this many vectors scan them exactly.
EXACT_LIMIT = 8192
#: HNSW candidate list per search (pgvector's ``hnsw.ef_search``; at least k).
EF_SEARCH = 200
#: Tuples an iterative HNSW scan may visit before it gives up on the filter.
MAX_SCAN_TUPLES = 50_000
#: The longest a rebuild's statements (copying, building the HNSW graph) may run.
MAINTENANCE_TIMEOUT_MS = 3_600_000
#: HNSW build parameters (pgvector's defaults).
HNSW_OPTIONS = "m = 16, ef_construction = 64"
#: Memory for building the HNSW graph in one pass (``maintenance_work_mem`` of that transaction):
#: enough for the whole graph (about ``4 d + 1 KiB`` per vector), within these bounds; never
#: below the server's own setting. A graph larger than this is built, more slowly, on disk.
BUILD_MEMORY_MIN_MB = 64
BUILD_MEMORY_MAX_MB = 8192


def _vec(vector: np.ndarray) -> np.ndarray:
    return np.asarray(vector, dtype=np.float32)


def _best(rows: Iterable[Sequence[float]], k: int) -> list[tuple[int, float]]:
    ordered = sorted(((int(mid), float(dist)) for mid, dist in rows), key=lambda r: (r[1], r[0]))
    return [(mid, 1.0 - dist) for mid, dist in ordered[:k]]


class PgVectors:
    """``memory_vectors`` as a :class:`~agentd.store.indexes.VectorIndex`."""

    def dimension(self, conn: sa.Connection) -> int | None:
        found = conn.exec_driver_sql(
            "SELECT a.atttypmod FROM pg_attribute a WHERE a.attrelid = to_regclass(%s) AND a.attname = 'embedding'",
            (TABLE,),
        ).scalar()
        return None if found is None or int(found) < 1 else int(found)

    def reset(self, conn: sa.Connection, dimension: int) -> None:
        conn.exec_driver_sql(f"DELETE FROM {TABLE}")
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ALTER COLUMN embedding TYPE vector({int(dimension)})")

    def insert(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        _insert(conn, TABLE, rows)

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE memory_id = %s", (memory_id,))

    def count(self, conn: sa.Connection) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar_one())

    def nearest(
        self,
        conn: sa.Connection,
        vector: np.ndarray,
        persona: str,
        scopes: Sequence[str],
        k: int,
        exact: bool = False,
        exact_limit: int | None = None,
    ) -> list[tuple[int, float]]:
        """See :meth:`VectorIndex.nearest`; ``exact_limit`` overrides :data:`EXACT_LIMIT` (tests, bench)."""
        query = _vec(vector)
        if not scopes and not exact:
            limit = EXACT_LIMIT if exact_limit is None else exact_limit
            # Counted up to the limit only: the cost stays bounded at any size.
            held = conn.exec_driver_sql(
                f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE persona = %s LIMIT %s) AS c", (persona, limit + 1)
            ).scalar_one()
            if int(held) > limit:
                return self._approximate(conn, query, persona, k)
        where = "persona = %s"
        params: list[object] = [persona]
        if scopes:
            where += " AND scope = ANY(%s)"
            params.append(list(scopes))
        rows = conn.exec_driver_sql(
            f"SELECT memory_id, embedding <=> %s AS d FROM {TABLE} WHERE {where} "
            "ORDER BY (embedding <=> %s) + 0, memory_id LIMIT %s",
            (query, *params, query, k),
        ).fetchall()
        return _best(rows, k)

    def _approximate(self, conn: sa.Connection, query: np.ndarray, persona: str, k: int) -> list[tuple[int, float]]:
        # Transaction-local settings: they end with the caller's transaction.
        conn.exec_driver_sql(
            "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('hnsw.max_scan_tuples', %s, true)",
            (str(min(1000, max(EF_SEARCH, k))), str(MAX_SCAN_TUPLES)),
        )
        rows = conn.exec_driver_sql(
            f"SELECT memory_id, embedding <=> %s FROM {TABLE} WHERE persona = %s ORDER BY embedding <=> %s LIMIT %s",
            (query, persona, query, k),
        ).fetchall()
        return _best(rows, k)

    def fetch(self, conn: sa.Connection, ids: Sequence[int]) -> list[VectorRow]:
        rows = conn.exec_driver_sql(
            f"SELECT memory_id, persona, scope, embedding FROM {TABLE} WHERE memory_id = ANY(%s) ORDER BY memory_id",
            ([int(i) for i in ids],),
        ).fetchall()
        # pgvector's loader gives its own Vector type.
        return [(int(m), str(p), str(s), _vec(e.to_numpy())) for m, p, s, e in rows]

    def missing(self, conn: sa.Connection) -> list[int]:
        rows = conn.exec_driver_sql(
            f"SELECT id FROM memories m WHERE NOT EXISTS (SELECT 1 FROM {TABLE} v WHERE v.memory_id = m.id) ORDER BY id"
        )
        return [int(r[0]) for r in rows]

    def invalid(self, conn: sa.Connection, dimension: int) -> list[int]:
        # pgvector refuses NaN and infinity, and the column's type fixes the dimension:
        # only the length can be wrong.
        rows = conn.exec_driver_sql(
            f"SELECT memory_id FROM {TABLE} WHERE NOT abs(vector_norm(embedding) - 1) <= 1e-3 "
            "OR vector_dims(embedding) <> %s ORDER BY memory_id",
            (dimension,),
        )
        return [int(r[0]) for r in rows]

    def begin_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {STAGING}")
        conn.exec_driver_sql(
            f"CREATE TABLE {STAGING} (memory_id BIGINT PRIMARY KEY, persona VARCHAR(64) NOT NULL, "
            f"scope VARCHAR(160) NOT NULL, embedding vector({int(dimension)}) NOT NULL)"
        )

    def insert_staged(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        _insert(conn, STAGING, rows)

    def finish_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        # Building the graph once over every vector is much faster than growing it row by row,
        # and at a million vectors takes longer than one ordinary statement may.
        conn.exec_driver_sql("SELECT set_config('statement_timeout', %s, true)", (str(MAINTENANCE_TIMEOUT_MS),))
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {HNSW}")
        self.reset(conn, dimension)
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE} (memory_id, persona, scope, embedding) "
            f"SELECT s.memory_id, s.persona, s.scope, s.embedding FROM {STAGING} s "
            "WHERE EXISTS (SELECT 1 FROM memories m WHERE m.id = s.memory_id)"
        )
        conn.exec_driver_sql(f"DROP TABLE {STAGING}")
        _build_graph(conn, dimension)

    def begin_bulk(self, conn: sa.Connection) -> None:
        """Drop the HNSW graph until :meth:`finish_bulk` (in the same transaction: readers of
        ``memory_vectors`` wait for its end, and a rollback brings the graph back)."""
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {HNSW}")

    def finish_bulk(self, conn: sa.Connection) -> None:
        """Build the HNSW graph once over every vector."""
        dimension = self.dimension(conn)
        if dimension is not None:
            _build_graph(conn, dimension)


def _build_graph(conn: sa.Connection, dimension: int) -> None:
    """``CREATE INDEX`` of the HNSW graph over the whole table, with the memory to hold it.

    Parallel workers are the server's ``max_parallel_maintenance_workers``
    (the embedded server's: one beside the leader).
    """
    held = int(conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar_one())
    wanted = held * (4 * dimension + 1024) // 2**20
    current = int(
        conn.exec_driver_sql(
            "SELECT setting::bigint * 1024 / 1048576 FROM pg_settings WHERE name = 'maintenance_work_mem'"
        ).scalar_one()
    )
    memory = max(current, min(BUILD_MEMORY_MAX_MB, max(BUILD_MEMORY_MIN_MB, wanted)))
    conn.exec_driver_sql(
        "SELECT set_config('statement_timeout', %s, true), set_config('maintenance_work_mem', %s, true)",
        (str(MAINTENANCE_TIMEOUT_MS), f"{memory}MB"),
    )
    conn.exec_driver_sql(
        f"CREATE INDEX IF NOT EXISTS {HNSW} ON {TABLE} USING hnsw (embedding vector_cosine_ops) WITH ({HNSW_OPTIONS})"
    )


def _insert(conn: sa.Connection, table: str, rows: Iterable[VectorRow]) -> None:
    """Vectors by binary ``COPY`` (pgvector's adapter), in the caller's transaction."""
    params = [(int(mid), persona, scope, _vec(vec)) for mid, persona, scope, vec in rows]
    if not params:
        return
    driver = conn.connection.driver_connection
    assert driver is not None
    sql = f"COPY {table} (memory_id, persona, scope, embedding) FROM STDIN (FORMAT BINARY)"
    with driver.cursor() as cursor, cursor.copy(sql) as copy:
        copy.set_types(["bigint", "varchar", "varchar", "vector"])
        for row in params:
            copy.write_row(row)
