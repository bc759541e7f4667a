"""The FTS5 table ``memory_fts``: the words of each memory, rowid = memory id.

Contentless (the text lives in ``memories``) with ``contentless_delete`` so a
forgotten memory leaves no trace. Two text columns: ``body`` (the memory's
text) and ``context`` (optional text that helps find the memory but is never
shown, e.g. the neighbouring turns of a conversation; see
:mod:`agentd.memory.indexing`). bm25 weighs a ``context`` match at
:data:`CONTEXT_WEIGHT` of a ``body`` match.

Scope isolation is done inside the full-text index itself: column ``skey``
holds one opaque token per (persona, scope) and one per persona, and every
query is ``skey:(tokens of the allowed scopes) AND {body context}:(query
terms)``, so FTS5 intersects posting lists instead of scoring other scopes'
rows and filtering afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

TABLE = "memory_fts"
CREATE_SQL = (
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(body, context, skey, content='', contentless_delete=1, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)
#: bm25 weight of a match in ``context`` relative to one in ``body``. Chosen on
#: LoCoMo dev conversations 0-2 (two neighbouring turns each side as context),
#: jointly with the fusion weights (agentd/memory/fusion.py): with
#: lexical_weight 1.5, 0.5 beats 0.2, 0.3, 0.4, 0.6 and 0.7 on dev R@10
#: (bench/locomo.py).
CONTEXT_WEIGHT = 0.5


def scope_token(persona: str, scope: str) -> str:
    """The opaque index token of one (persona, scope)."""
    return "k" + hashlib.sha1(f"{persona}\x1f{scope}".encode()).hexdigest()[:20]


def persona_token(persona: str) -> str:
    """The opaque index token of every scope of one persona."""
    return "p" + hashlib.sha1(persona.encode()).hexdigest()[:20]


def _skey(persona: str, scope: str) -> str:
    return f"{persona_token(persona)} {scope_token(persona, scope)}"


def insert(conn: sa.Connection, rows: Iterable[tuple[int, str, str, str] | tuple[int, str, str, str, str]]) -> None:
    """Index ``(memory_id, persona, scope, text[, context])`` rows."""
    params = [(r[0], r[3], r[4] if len(r) > 4 else "", _skey(r[1], r[2])) for r in rows]
    if params:
        conn.exec_driver_sql(f"INSERT INTO {TABLE}(rowid, body, context, skey) VALUES (?, ?, ?, ?)", params)


def reindex(conn: sa.Connection, rows: Iterable[tuple[int, str, str, str, str]]) -> None:
    """Replace the indexed words of ``(memory_id, persona, scope, text, context)`` rows."""
    params = [(text, context, _skey(persona, scope), mid) for mid, persona, scope, text, context in rows]
    if params:
        # A contentless_delete table accepts UPDATE when every column is given.
        conn.exec_driver_sql(f"UPDATE {TABLE} SET body = ?, context = ?, skey = ? WHERE rowid = ?", params)


def delete(conn: sa.Connection, memory_id: int) -> None:
    """Remove one memory from the index."""
    conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE rowid = ?", (memory_id,))


def quote(term: str) -> str:
    """An FTS5 string literal for ``term`` (no query syntax survives)."""
    return '"' + term.replace('"', '""') + '"'


def search(
    conn: sa.Connection, terms: Sequence[str], persona: str, scopes: Sequence[str], k: int
) -> list[tuple[int, float]]:
    """The ``k`` best ``(memory_id, bm25)`` for any of ``terms`` (bm25: higher is better).

    ``scopes`` empty means every scope of the persona.
    """
    if not terms:
        return []
    keys = [scope_token(persona, s) for s in scopes] if scopes else [persona_token(persona)]
    match = f"skey:({' OR '.join(keys)}) AND {{body context}}:({' OR '.join(quote(t) for t in terms)})"
    rows = conn.exec_driver_sql(
        f"SELECT rowid, -bm25({TABLE}, 1.0, ?, 0.0) AS score FROM {TABLE} WHERE {TABLE} MATCH ? "
        "ORDER BY score DESC, rowid LIMIT ?",
        (CONTEXT_WEIGHT, match, k),
    ).fetchall()
    return [(int(mid), float(score)) for mid, score in rows]
