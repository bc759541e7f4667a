"""The sqlite-vec tables: exact float vectors, and their binary-quantized twins.

``memory_vectors`` holds one float vector per memory (rowid = memory id) under
cosine distance. persona and scope are vec0 *partition keys*, so a scoped k-NN
query reads only that (persona, scope)'s chunks. sqlite-vec 0.1.9 silently
returns unmerged per-partition results for ``IN``/``OR`` on partition keys, so
a search over several scopes runs one exact query per scope and merges here.

``memory_vectors_bits`` holds the same vectors quantized to one bit per
dimension (``vec_quantize_binary``: the sign), with the same partitions. This
build of sqlite-vec has no SIMD: brute force costs about 0.5 µs per float
vector, so half a second over one persona's million memories, and ~13 ms over
a 20k-memory global scope that every scoped search of that persona reads. When
a search covers more than :data:`EXACT_LIMIT` vectors, the 48-byte bit vectors
are compared instead (Hamming distance, numpy over the table's chunks) and the
best :data:`RESCORE` candidates are rescored exactly with cosine on the float
vectors: the answer is exact whenever the true neighbours are among the
candidates, and ``bench/search.py`` prints how often they are. Smaller
searches (most channels and users) stay exact.

Both tables change together: :func:`insert` and :func:`delete` write both, and
:func:`rebuild_coarse` re-derives the bit table from the float one (re-embedding,
rebinding). :class:`SqliteVectors` is this module as the store's
:class:`~agentd.store.indexes.VectorIndex`.

numpy is imported by the functions that compute with it: opening a store and
reading memories (``agentd memory list``) do not need it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from agentd.store.indexes import VectorRow

if TYPE_CHECKING:
    import numpy as np

TABLE = "memory_vectors"
#: Where re-embedding stages the new model's vectors until they replace the live ones.
STAGING = TABLE + "_next"
COARSE = "memory_vectors_bits"
#: Vectors per chunk. Small, because most (persona, scope) partitions are small
#: and a k-NN query reads whole chunks (bench/search.py measures this).
CHUNK_SIZE = 128
#: Bit vectors per chunk: 12 kB of bits, so a persona-wide scan reads few rows
#: and a small scope wastes little.
COARSE_CHUNK_SIZE = 256
#: Searches over at most this many vectors scan the float vectors exactly
#: (about 4 ms here); larger ones go through the bit vectors, if they hold more
#: than 16 vectors per rescored candidate (rescoring one costs about what
#: scanning 16 does).
EXACT_LIMIT = 8192
#: Candidates the Hamming scan hands to exact rescoring in a persona-wide
#: search (at least; ``8 * k`` when more are asked for). Each costs a ~5-10 µs
#: point lookup. A million bench memories: top-10 recall 0.93 with 1000, 0.76
#: with 400.
RESCORE = 1000
#: The same for a scoped search over more than EXACT_LIMIT vectors (a reach of
#: 30k at a million bench memories: top-10 recall 0.99 with 300, 1.0 with 500).
SCOPED_RESCORE = 400

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
        "persona TEXT PARTITION KEY, scope TEXT PARTITION KEY, "
        f"embedding BIT[{int(dimension)}], chunk_size={COARSE_CHUNK_SIZE})"
    )


def table_dimension(conn: sa.Connection, table: str = TABLE) -> int | None:
    """The dimension the existing table was created with (``None`` if it does not exist)."""
    sql = _ddl(conn, table)
    found = _DIM.search(sql) if sql else None
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
        f"INSERT INTO {COARSE}(rowid, persona, scope, embedding) "
        f"SELECT rowid, persona, scope, vec_quantize_binary(embedding) FROM {TABLE}"
    )
    _index_chunks(conn)


def _index_chunks(conn: sa.Connection) -> None:
    # vec0 finds a partition's chunks by scanning its chunk table: ~8k rows per
    # million vectors, a few ms per scoped query. An index on the partition
    # columns turns that into a lookup (dropped with the table, recreated here).
    for table in (TABLE, COARSE):
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {table}_chunks_partition ON {table}_chunks(partition00, partition01)"
        )


def _ddl(conn: sa.Connection, table: str) -> str | None:
    row = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    return None if row is None else str(row[0])


def _coarse_usable(conn: sa.Connection) -> bool:
    """The bit table exists, matches the float table, and its storage format is one this module reads.

    Asked before every search and insert: both tables' DDL in one read of the schema, and
    sqlite-vec's version once per process (the extension loaded is the one its package ships).
    """
    ddl: dict[str, str] = {str(n): str(q) for n, q in conn.exec_driver_sql(_BOTH_DDL, (TABLE, COARSE))}
    found = _DIM.search(ddl.get(TABLE) or "")
    if found is None or ddl.get(COARSE) != coarse_create_sql(int(found.group(1))):
        return False
    return _reads_storage(conn)


_BOTH_DDL = "SELECT name, sql FROM sqlite_master WHERE name IN (?, ?)"


def _reads_storage(conn: sa.Connection) -> bool:
    """Whether the loaded sqlite-vec stores chunks as this module reads them (0.1.x)."""
    global _VEC_VERSION
    if _VEC_VERSION is None:
        _VEC_VERSION = str(conn.exec_driver_sql("SELECT vec_version()").scalar_one())
    return _VEC_VERSION.startswith("v0.1.")


#: sqlite-vec's version in this process (every connection loads the same extension file).
_VEC_VERSION: str | None = None


def insert(conn: sa.Connection, rows: Iterable[tuple[int, str, str, np.ndarray]], table: str = TABLE) -> None:
    """Insert ``(memory_id, persona, scope, vector)`` rows (into the bit table too for :data:`TABLE`)."""
    import numpy as np

    params = [(mid, persona, scope, np.asarray(vec, dtype=np.float32).tobytes()) for mid, persona, scope, vec in rows]
    if not params:
        return
    if table == TABLE and not _coarse_usable(conn):
        # The float table is recreated outside this module when a store is
        # first bound to a model of another dimension. Rebuild first: it copies
        # what the float table holds.
        rebuild_coarse(conn)
    conn.exec_driver_sql(f"INSERT INTO {table}(rowid, persona, scope, embedding) VALUES (?, ?, ?, ?)", params)
    if table == TABLE:
        conn.exec_driver_sql(
            f"INSERT INTO {COARSE}(rowid, persona, scope, embedding) VALUES (?, ?, ?, vec_quantize_binary(?))", params
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
    exact_limit: int | None = None,
    candidates: int | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` nearest ``(memory_id, cosine_similarity)`` in persona ∩ scopes, best first.

    ``scopes`` empty means every scope of the persona. Searches over more than
    ``exact_limit`` vectors (default: see :data:`EXACT_LIMIT`) go through the
    bit vectors unless ``exact`` is set, and rescore ``max(candidates, 8 * k)``
    of them (default :data:`RESCORE` persona-wide, :data:`SCOPED_RESCORE` scoped).
    """
    import numpy as np

    blob = np.asarray(vector, dtype=np.float32).tobytes()
    if not exact and _coarse_usable(conn):
        pool = candidates if candidates is not None else (SCOPED_RESCORE if scopes else RESCORE)
        n = max(pool, 8 * k)
        limit = max(EXACT_LIMIT, 16 * n) if exact_limit is None else exact_limit
        ids = coarse_candidates(conn, blob, persona, scopes, n, limit)
        if ids is not None:
            return _best(_rescore(conn, blob, ids), k)
    if not scopes:
        sql = f"SELECT rowid, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ? AND persona = ?"
        return _best(_knn(conn, sql, blob, k, (persona,)), k)
    found: list[Sequence[Any]] = []
    for scope in scopes:
        sql = f"SELECT rowid, distance FROM {TABLE} WHERE embedding MATCH ? AND k = ? AND persona = ? AND scope = ?"
        found.extend(_knn(conn, sql, blob, k, (persona, scope)))
    return _best(found, k)


def _knn(conn: sa.Connection, sql: str, blob: bytes, k: int, where: tuple[str, ...]) -> list[Sequence[Any]]:
    """vec0's k nearest rows; asked again for more when rows without a distance took places.

    A stored vector that is not finite or is all zeros (agentd never writes one, an
    older release or a hand edit may have) has no cosine distance: vec0 returns it
    with a NULL distance, *first*, in place of a real neighbour.
    """
    want = k
    while True:
        rows = conn.exec_driver_sql(sql, (blob, want, *where)).fetchall()
        broken = sum(1 for r in rows if not _has_distance(r[1]))
        if not broken or len(rows) < want or len(rows) - broken >= k:
            return list(rows)
        want = k + broken if broken < want else want * 2


def _has_distance(value: object) -> bool:
    return value is not None and math.isfinite(float(value))  # type: ignore[arg-type]


def invalid(conn: sa.Connection, dimension: int, batch: int = 4096) -> list[int]:
    """Ids of stored vectors that are not finite unit vectors of ``dimension`` (searches skip them;
    ``agentd memory reembed`` rewrites them). Reads every vector."""
    import numpy as np

    found: list[int] = []
    width = dimension * 4
    result = conn.exec_driver_sql(f"SELECT rowid, embedding FROM {TABLE}")
    while rows := result.fetchmany(batch):
        ok = [r for r in rows if isinstance(r[1], bytes) and len(r[1]) == width]
        found.extend(int(r[0]) for r in rows if not (isinstance(r[1], bytes) and len(r[1]) == width))
        if not ok:
            continue
        vecs = np.frombuffer(b"".join(r[1] for r in ok), np.float32).reshape(len(ok), dimension)
        with np.errstate(invalid="ignore", over="ignore"):
            norms = np.linalg.norm(vecs, axis=1)
            bad = ~np.isfinite(vecs).all(axis=1) | ~(np.abs(norms - 1.0) <= 1e-3)
        found.extend(int(ok[i][0]) for i in np.flatnonzero(bad))
    return sorted(found)


def coarse_candidates(
    conn: sa.Connection, blob: bytes, persona: str, scopes: Sequence[str], n: int, exact_limit: int = 0
) -> list[int] | None:
    """The ids of the ``n`` vectors of persona ∩ scopes nearest ``blob`` in Hamming distance of their signs.

    ``None`` when they are no more than ``exact_limit`` (scan those exactly instead).
    """
    import numpy as np

    # vec0's own k-NN over bits costs O(rows × k) (a selection per chunk), no
    # faster than the float scan at k in the hundreds, so its chunk tables are
    # read here: ``rowids`` (int64 per slot), ``validity`` (one bit per slot,
    # little-endian) and the slots' bits. This is sqlite-vec 0.1.x's storage
    # format; tests/test_vector_scale.py checks the result against its k-NN.
    where, params = "partition00 = ?", [persona]
    if scopes:
        where += f" AND partition01 IN ({', '.join('?' * len(scopes))})"
        params += list(scopes)
    chunks = conn.exec_driver_sql(
        f"SELECT chunk_id, rowids, validity FROM {COARSE}_chunks WHERE {where}", tuple(params)
    ).fetchall()
    if not chunks:
        return None
    valid = np.unpackbits(np.frombuffer(b"".join(c[2] for c in chunks), np.uint8), bitorder="little").astype(bool)
    if int(valid.sum()) <= exact_limit:
        return None
    query = np.frombuffer(conn.exec_driver_sql("SELECT vec_quantize_binary(?)", (blob,)).scalar_one(), np.uint8)
    word = np.uint64 if query.size % 8 == 0 else np.uint8
    query = query.view(word)
    found: dict[int, bytes] = dict(
        conn.exec_driver_sql(
            f"SELECT rowid, vectors FROM {COARSE}_vector_chunks00 WHERE rowid IN (SELECT value FROM json_each(?))",
            (json.dumps([c[0] for c in chunks]),),
        ).fetchall()
    )
    # Batches of chunks, vectorised within a batch: numpy per chunk costs more
    # in call overhead than the comparisons, and one array over a million
    # vectors costs more in page faults of fresh 48 MB buffers.
    dist = np.empty(len(valid), np.uint16)
    slots = len(valid) // len(chunks)
    for start in range(0, len(chunks), _BATCH):
        batch = chunks[start : start + _BATCH]
        bits = np.frombuffer(bytearray().join(found[c[0]] for c in batch), word).reshape(-1, query.size)
        np.bitwise_xor(bits, query, out=bits)
        counts = np.bitwise_count(bits)
        part = dist[start * slots : start * slots + len(bits)]
        part[:] = counts[:, 0]
        for column in range(1, query.size):  # numpy's sum over a short last axis is slower
            part += counts[:, column]
    ids = np.frombuffer(b"".join(c[1] for c in chunks), np.int64)
    return [int(i) for i in ids[_smallest(dist, valid, n)]]


#: Chunks compared per numpy batch (3 MB of 384-bit vectors at 256 per chunk).
_BATCH = 256


def _smallest(dist: np.ndarray, valid: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` smallest valid distances, ties by position (deterministic).

    Hamming distances are small integers, so a histogram finds the cut-off in
    linear time; argpartition over a million entries costs several times more.
    """
    import numpy as np

    dist[~valid] = np.iinfo(dist.dtype).max  # empty and deleted slots
    n = min(n, int(valid.sum()))
    cut = int(np.searchsorted(np.cumsum(np.bincount(dist)), n))
    below = np.flatnonzero(dist < cut)
    return np.concatenate([below, np.flatnonzero(dist == cut)[: n - len(below)]])


def _rescore(conn: sa.Connection, blob: bytes, ids: list[int]) -> list[tuple[int, float]]:
    # CROSS JOIN keeps the candidate list outermost, so vec0 answers one rowid
    # point lookup per candidate (``rowid IN (…)`` makes it scan every vector).
    rows = conn.exec_driver_sql(
        f"SELECT c.value, vec_distance_cosine(v.embedding, ?) FROM json_each(?) AS c "
        f"CROSS JOIN {TABLE} AS v ON v.rowid = c.value",
        (blob, json.dumps(ids)),
    ).fetchall()
    return [(int(mid), float(dist)) for mid, dist in rows if _has_distance(dist)]


def _best(rows: Iterable[Sequence[Any]], k: int) -> list[tuple[int, float]]:
    # A vector without a distance (see _knn) is never a neighbour.
    ordered = sorted(((int(mid), float(dist)) for mid, dist in rows if _has_distance(dist)), key=lambda r: (r[1], r[0]))
    return [(mid, 1.0 - dist) for mid, dist in ordered[:k]]


class SqliteVectors:
    """The sqlite-vec tables as a :class:`~agentd.store.indexes.VectorIndex`."""

    def dimension(self, conn: sa.Connection) -> int | None:
        return table_dimension(conn)

    def reset(self, conn: sa.Connection, dimension: int) -> None:
        # The bit table follows at the next insert (see insert: _coarse_usable).
        drop(conn)
        conn.exec_driver_sql(create_sql(dimension))

    def insert(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        insert(conn, rows)

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        delete(conn, memory_id)

    def count(self, conn: sa.Connection) -> int:
        if table_dimension(conn) is None:
            return 0
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar_one())

    def nearest(
        self, conn: sa.Connection, vector: np.ndarray, persona: str, scopes: Sequence[str], k: int, exact: bool = False
    ) -> list[tuple[int, float]]:
        return nearest(conn, vector, persona, scopes, k, exact=exact)

    def fetch(self, conn: sa.Connection, ids: Sequence[int]) -> list[VectorRow]:
        import numpy as np

        rows = conn.exec_driver_sql(
            f"SELECT c.value, v.persona, v.scope, v.embedding FROM json_each(?) AS c "
            f"CROSS JOIN {TABLE} AS v ON v.rowid = c.value",
            (json.dumps([int(i) for i in ids]),),
        ).fetchall()
        return [(int(m), str(p), str(s), np.frombuffer(e, np.float32)) for m, p, s, e in rows]

    def missing(self, conn: sa.Connection) -> list[int]:
        rows = conn.exec_driver_sql(f"SELECT id FROM memories WHERE id NOT IN (SELECT rowid FROM {TABLE})")
        return [int(r[0]) for r in rows]

    def invalid(self, conn: sa.Connection, dimension: int) -> list[int]:
        return invalid(conn, dimension)

    def begin_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        drop(conn, STAGING)
        conn.exec_driver_sql(create_sql(dimension, STAGING))

    def insert_staged(self, conn: sa.Connection, rows: Iterable[VectorRow]) -> None:
        insert(conn, rows, STAGING)

    def finish_rebuild(self, conn: sa.Connection, dimension: int) -> None:
        drop(conn)
        conn.exec_driver_sql(create_sql(dimension))
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE}(rowid, persona, scope, embedding) "
            f"SELECT rowid, persona, scope, embedding FROM {STAGING} WHERE rowid IN (SELECT id FROM memories)"
        )
        drop(conn, STAGING)
        # The bit table still holds the old model's signs: re-derive it.
        rebuild_coarse(conn)

    def begin_bulk(self, conn: sa.Connection) -> None:
        """Nothing to defer: vec0 partitions and the bit table grow row by row at the same cost."""

    def finish_bulk(self, conn: sa.Connection) -> None:
        """Nothing to build (see :meth:`begin_bulk`)."""
