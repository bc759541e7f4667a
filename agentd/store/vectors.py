"""The sqlite-vec tables: exact float vectors, and their binary-quantized twins.

``memory_vectors`` holds one float vector per memory (rowid = memory id) under
cosine distance. persona and scope are vec0 *partition keys*, so a scoped k-NN
query reads only that (persona, scope)'s chunks. sqlite-vec 0.1.9 silently
returns unmerged per-partition results for ``IN``/``OR`` on partition keys, so
a search over several scopes runs one exact query per scope and merges here.

``memory_vectors_bits`` holds the same vectors quantized to one bit per
dimension (``vec_quantize_binary``: sign), partitioned by persona only. A
persona-wide search cannot use the scope partitions, and brute force over one
persona's million float vectors takes about half a second with this build of
sqlite-vec (no SIMD); the same scan over 48-byte bit vectors under Hamming
distance is an order of magnitude cheaper. Its best :data:`RESCORE` candidates
are then rescored exactly against the float vectors, so the answer is exact
whenever the true neighbours are among the candidates (``bench/search.py``
prints the recall). Scoped searches never use it.

Both tables change together: :func:`insert` and :func:`delete` write both, and
:func:`rebuild_coarse` re-derives the bit table from the float one (migration
0003 and re-embedding).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

import numpy as np
import sqlalchemy as sa

TABLE = "memory_vectors"
COARSE = "memory_vectors_bits"
#: Vectors per chunk. Small, because most (persona, scope) partitions are small
#: and a k-NN query reads whole chunks (bench/search.py measures this).
CHUNK_SIZE = 128
#: Bit vectors per chunk. The bit table has one partition per persona, scanned
#: whole, so bigger chunks mean fewer blob reads (a chunk of 1024 is 48 kB).
COARSE_CHUNK_SIZE = 1024
#: Candidates the Hamming scan hands to exact rescoring (at least; ``k * 10``
#: when more are asked for). bench/search.py measures recall against exact.
RESCORE = 400

_DIM = re.compile(r"\b(?:FLOAT|BIT)\[(\d+)\]", re.IGNORECASE)


def create_sql(dimension: int, table: str = TABLE) -> str:
    """DDL of the float vector table for ``dimension``-d vectors under cosine distance."""
    return (
        f"CREATE VIRTUAL TABLE {table} USING vec0("
        "persona TEXT PARTITION KEY, scope TEXT PARTITION KEY, "
        f"embedding FLOAT[{int(dimension)}] distance_metric=cosine, chunk_size={CHUNK_SIZE})"
    )


def coarse_create_sql(dimension: int, table: str = COARSE) -> str:
    """DDL of the binary-quantized table for ``dimension``-d vectors under Hamming distance."""
    return (
        f"CREATE VIRTUAL TABLE {table} USING vec0("
        f"persona TEXT PARTITION KEY, embedding BIT[{int(dimension)}], chunk_size={COARSE_CHUNK_SIZE})"
    )


def table_dimension(conn: sa.Connection, table: str = TABLE) -> int | None:
    """The dimension the existing table was created with (``None`` if it does not exist)."""
    row = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if row is None:
        return None
    found = _DIM.search(row[0])
    return int(found.group(1)) if found else None


def drop(conn: sa.Connection, table: str = TABLE) -> None:
    """Drop the vector table if it exists."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def rebuild_coarse(conn: sa.Connection) -> None:
    """Inside a write transaction: re-derive the bit table from every float vector.

    Drops it when there is no float table.
    """
    drop(conn, COARSE)
    dimension = table_dimension(conn, TABLE)
    if dimension is None:
        return
    conn.exec_driver_sql(coarse_create_sql(dimension))
    conn.exec_driver_sql(
        f"INSERT INTO {COARSE}(rowid, persona, embedding) "
        f"SELECT rowid, persona, vec_quantize_binary(embedding) FROM {TABLE}"
    )


def _ensure_coarse(conn: sa.Connection) -> None:
    # The float table is recreated outside this module when a store is first
    # bound to a model of another dimension; follow it here, before writing.
    if table_dimension(conn, COARSE) != table_dimension(conn, TABLE):
        rebuild_coarse(conn)


def insert(conn: sa.Connection, rows: Iterable[tuple[int, str, str, np.ndarray]], table: str = TABLE) -> None:
    """Insert ``(memory_id, persona, scope, vector)`` rows (into the bit table too for :data:`TABLE`)."""
    params = [(mid, persona, scope, np.asarray(vec, dtype=np.float32).tobytes()) for mid, persona, scope, vec in rows]
    if not params:
        return
    if table == TABLE:
        _ensure_coarse(conn)  # first: a rebuild copies what the float table holds
    conn.exec_driver_sql(f"INSERT INTO {table}(rowid, persona, scope, embedding) VALUES (?, ?, ?, ?)", params)
    if table == TABLE:
        conn.exec_driver_sql(
            f"INSERT INTO {COARSE}(rowid, persona, embedding) VALUES (?, ?, vec_quantize_binary(?))",
            [(mid, persona, blob) for mid, persona, _scope, blob in params],
        )


def delete(conn: sa.Connection, memory_id: int) -> None:
    """Remove one memory's vector from both tables."""
    conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE rowid = ?", (memory_id,))
    conn.exec_driver_sql(f"DELETE FROM {COARSE} WHERE rowid = ?", (memory_id,))


def nearest(
    conn: sa.Connection,
    vector: np.ndarray,
    persona: str,
    scopes: Sequence[str],
    k: int,
    exact: bool = False,
) -> list[tuple[int, float]]:
    """The ``k`` nearest ``(memory_id, cosine_similarity)`` in persona ∩ scopes, best first.

    ``scopes`` empty means every scope of the persona: then the bit table picks
    candidates and the float vectors rank them, unless ``exact`` asks for the
    brute-force scan (or the bit table is not usable).
    """
    blob = np.asarray(vector, dtype=np.float32).tobytes()
    if not scopes:
        if not exact and table_dimension(conn, COARSE) == table_dimension(conn, TABLE):
            return coarse_nearest(conn, blob, persona, k)
        rows = conn.exec_driver_sql(
            f"SELECT rowid, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ? AND persona = ?",
            (blob, k, persona),
        ).fetchall()
        return _best(rows, k)
    found: list[tuple[int, float]] = []
    for scope in scopes:
        found.extend(
            conn.exec_driver_sql(
                f"SELECT rowid, distance FROM {TABLE} "
                "WHERE embedding MATCH ? AND k = ? AND persona = ? AND scope = ?",
                (blob, k, persona, scope),
            ).fetchall()
        )
    return _best(found, k)


def coarse_nearest(conn: sa.Connection, blob: bytes, persona: str, k: int) -> list[tuple[int, float]]:
    """Persona-wide: Hamming candidates from the bit table, rescored by exact cosine."""
    ids = coarse_candidates(conn, blob, persona, max(RESCORE, k * 10))
    if not ids:
        return []
    # CROSS JOIN keeps the candidate list outermost, so vec0 answers one rowid
    # point lookup per candidate (``rowid IN (…)`` makes it scan every vector).
    rows = conn.exec_driver_sql(
        f"SELECT c.value, vec_distance_cosine(v.embedding, ?) FROM json_each(?) AS c "
        f"CROSS JOIN {TABLE} AS v ON v.rowid = c.value",
        (blob, json.dumps(ids)),
    ).fetchall()
    return _best(rows, k)


def coarse_candidates(conn: sa.Connection, blob: bytes, persona: str, n: int) -> list[int]:
    """The ids of about the ``n`` persona vectors nearest ``blob`` in Hamming distance of their signs."""
    if not _shadow_layout_known(conn):
        rows = conn.exec_driver_sql(
            f"SELECT rowid FROM {COARSE} WHERE embedding MATCH vec_quantize_binary(?) AND k = ? AND persona = ?",
            (blob, n, persona),
        ).fetchall()
        return [int(r[0]) for r in rows]
    # vec0's own k-NN over this table costs O(rows × k) (a selection per chunk)
    # and is no faster than the float scan at k in the hundreds, so the bits
    # are read straight from its chunk tables and compared here with numpy.
    query = np.frombuffer(conn.exec_driver_sql("SELECT vec_quantize_binary(?)", (blob,)).scalar_one(), np.uint8)
    word = np.uint64 if query.size % 8 == 0 else np.uint8
    query = query.view(word)
    result = conn.exec_driver_sql(
        f"SELECT c.rowids, c.validity, v.vectors FROM {COARSE}_chunks AS c "
        f"CROSS JOIN {COARSE}_vector_chunks00 AS v ON v.rowid = c.chunk_id WHERE c.partition00 = ?",
        (persona,),
    )
    all_ids: list[np.ndarray] = []
    all_dist: list[np.ndarray] = []
    while batch := result.fetchmany(256):
        ids = np.frombuffer(b"".join(r[0] for r in batch), np.int64)
        valid = np.unpackbits(np.frombuffer(b"".join(r[1] for r in batch), np.uint8), bitorder="little")
        bits = np.frombuffer(b"".join(r[2] for r in batch), word).reshape(len(ids), query.size)
        dist = np.bitwise_count(bits ^ query).sum(axis=1, dtype=np.int32)
        keep = valid[: len(ids)].astype(bool)
        all_ids.append(ids[keep])
        all_dist.append(dist[keep])
    if not all_ids:
        return []
    ids = np.concatenate(all_ids)
    dist = np.concatenate(all_dist)
    if len(ids) > n:
        ids = ids[np.argpartition(dist, n - 1)[:n]]
    return [int(i) for i in ids]


def _shadow_layout_known(conn: sa.Connection) -> bool:
    # The chunk tables are sqlite-vec's storage format, stable within 0.1.x
    # (tests/test_vector_scale.py checks the result against vec0's own k-NN);
    # any other version falls back to vec0's query.
    return str(conn.exec_driver_sql("SELECT vec_version()").scalar_one()).startswith("v0.1.")


def _best(rows: Iterable[Sequence[float]], k: int) -> list[tuple[int, float]]:
    ordered = sorted(((int(mid), float(dist)) for mid, dist in rows), key=lambda r: (r[1], r[0]))
    return [(mid, 1.0 - dist) for mid, dist in ordered[:k]]
