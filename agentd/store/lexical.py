"""The FTS5 table ``memory_fts``: the words of each memory, rowid = memory id.

Contentless (the text lives in ``memories``) with ``contentless_delete`` so a
forgotten memory leaves no trace. Two text columns: ``body`` (the memory's
text) and ``context`` (its ``metadata["context"]``, see :func:`context_of`).
bm25 weighs a ``context`` match at :data:`CONTEXT_WEIGHT` of a ``body`` match.

Scope isolation is done inside the full-text index itself: column ``skey``
holds one opaque token per (persona, scope) and one per persona, and every
query is ``skey:(tokens of the allowed scopes) AND {body context}:(query
terms)``, so FTS5 intersects posting lists instead of scoring other scopes'
rows and filtering afterwards.

The work of one query is bounded by document frequency (the "common terms"
cutoff of search engines): FTS5 reads every posting of every query term and
bm25-scores each match in the reach, so a term found in a large share of the
index costs the most while its idf (≈ log(N/df)) says the least. When the
terms together have more than :data:`TERM_BUDGET` postings, the commonest are
dropped and the rarest kept (always at least one); below it the query is
exactly the full OR of the terms. See :func:`search`.

:class:`SqliteText` is this module as the store's :class:`~agentd.store.indexes.TextIndex`.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from agentd.store.indexes import WordsRow

TABLE = "memory_fts"
CREATE_SQL = (
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(body, context, skey, content='', contentless_delete=1, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)
#: The metadata key whose string is indexed with a memory (:func:`context_of`).
CONTEXT_KEY = "context"
#: bm25 weight of a match in ``context`` relative to one in ``body``. Chosen on
#: LoCoMo dev conversations 0-2 (two neighbouring turns each side as context),
#: jointly with the fusion weights (agentd/search/fusion.py): with
#: lexical_weight 1.5, 0.5 beats 0.2, 0.3, 0.4, 0.6 and 0.7 on dev R@10
#: (bench/locomo.py).
CONTEXT_WEIGHT = 0.5

#: At most this many postings (summed document frequency over the whole index,
#: ``body`` or ``context``) for the terms of one query; past it the commonest
#: terms are dropped. Chosen on bench/search.py at 1M memories: a kept set of
#: ~20k postings costs FTS5 about 5 ms in a scoped search (~0.25 µs per
#: posting read and scored) and counting up to it ~1.5 ms, which keeps a scoped
#: hybrid search within its 15 ms target; LoCoMo conversations (hundreds of
#: memories per persona) stay far below it, so their results are unchanged.
#: 0 turns the bound off.
TERM_BUDGET = 20_000
#: How long a term's count is remembered (per database, in this process)
#: before it is counted again. Counting a term costs up to the budget's worth of
#: postings on every query otherwise (at 100k memories, as much as the query
#: saves). A remembered count only decides which terms are sent, never what
#: they match: a term that grew past the budget (or that mass deletions made
#: rare again) is judged by its old count for at most this long.
COMMON_TTL = 600.0
_COMMON_MAX = 4096

# engine -> {term: (postings counted, exact (under the cap it was counted with), expires at)}.
_common: weakref.WeakKeyDictionary[object, dict[str, tuple[int, bool, float]]] = weakref.WeakKeyDictionary()


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


def context_of(metadata: Mapping[str, Any] | None) -> str:
    """What is indexed for a memory besides its text: its ``metadata["context"]`` ("" when none).

    A string that helps *find* a memory but is not part of what it says, e.g. the
    neighbouring turns of the conversation a turn came from, whose words often
    hold what a question asks about ("Where was it?" / "In Paris!"). It is
    indexed in the ``context`` column, weighted below the text; it is not
    embedded (measured on LoCoMo: embedding it too cost three times the ingest
    time for no gain once the words are indexed). Results, prompts and dedupe
    only ever use the text.
    """
    value = (metadata or {}).get(CONTEXT_KEY)
    return value.strip() if isinstance(value, str) else ""


def delete(conn: sa.Connection, memory_id: int) -> None:
    """Remove one memory from the index."""
    conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE rowid = ?", (memory_id,))


def quote(term: str) -> str:
    """An FTS5 string literal for ``term`` (no query syntax survives)."""
    return '"' + term.replace('"', '""') + '"'


def postings(conn: sa.Connection, term: str, cap: int) -> int:
    """How many memories have ``term`` in ``body`` or ``context``, counted up to ``cap`` (cost ∝ the result).

    Counted by FTS5 itself, so the term is tokenized and stemmed as in a query.
    """
    return int(
        conn.exec_driver_sql(
            f"SELECT count(*) FROM (SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH ? LIMIT ?)",
            ("{body context}:" + quote(term), cap),
        ).scalar_one()
    )


def bounded_terms(conn: sa.Connection, terms: Sequence[str], budget: int = TERM_BUDGET) -> list[str]:
    """``terms`` without the commonest ones past ``budget`` postings in total, in their order.

    Terms are taken rarest first while their summed document frequency stays
    within ``budget``; the rarest is always kept. Counts are remembered for
    :data:`COMMON_TTL` seconds.
    """
    if len(terms) < 2:
        return list(terms)
    # A term has at most one posting per row and rowids are distinct, so when even
    # every term matching every row stays within the budget there is nothing to count
    # (the common case for all but very large stores; saves a query per term).
    top = conn.exec_driver_sql(f"SELECT rowid FROM {TABLE} ORDER BY rowid DESC LIMIT 1").scalar()
    if top is None or len(terms) * int(top) <= budget:
        return list(terms)
    cache = _common.setdefault(conn.engine, {})
    now = time.monotonic()
    df: dict[str, int] = {}
    for term in terms:
        seen = cache.get(term)
        # A count below its cap is exact and serves any budget; a capped one only says "more than".
        if seen is not None and seen[2] > now and (seen[1] or seen[0] > budget):
            df[term] = seen[0]
            continue
        cap = budget + 1
        n = postings(conn, term, cap)
        df[term] = n
        if len(cache) >= _COMMON_MAX:
            cache.clear()
        cache[term] = (n, n < cap, now + COMMON_TTL)
    return within_budget(terms, df, budget)


def within_budget(terms: Sequence[str], df: Mapping[str, int], budget: int) -> list[str]:
    """The rarest of ``terms`` (by their document frequency ``df``) within ``budget`` postings in
    total (the rarest always), in their order: both text indexes bound a query this way."""
    if sum(df[t] for t in dict.fromkeys(terms)) <= budget:
        return list(terms)
    kept: set[str] = set()
    total = 0
    for i, term in enumerate(sorted(terms, key=lambda t: df[t])):
        if i and total + df[term] > budget:
            break
        kept.add(term)
        total += df[term]
    return [t for t in terms if t in kept]


def search(
    conn: sa.Connection,
    terms: Sequence[str],
    persona: str,
    scopes: Sequence[str],
    k: int,
    budget: int | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` best ``(memory_id, bm25)`` for any of ``terms`` (bm25: higher is better).

    ``scopes`` empty means every scope of the persona. ``budget`` bounds the
    postings the query reads (:func:`bounded_terms`); ``None`` means
    :data:`TERM_BUDGET` (read at call time), ``0`` sends every term.
    """
    budget = TERM_BUDGET if budget is None else budget
    if budget > 0:
        terms = bounded_terms(conn, terms, budget)
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


class SqliteText:
    """The FTS5 table as a :class:`~agentd.store.indexes.TextIndex`."""

    def insert(self, conn: sa.Connection, rows: Iterable[WordsRow]) -> None:
        insert(conn, rows)

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        delete(conn, memory_id)

    def count(self, conn: sa.Connection) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar_one())

    def purge(self, conn: sa.Connection) -> None:
        # A delete leaves the terms in FTS5's segments behind a tombstone until segments merge;
        # 'optimize' merges them all into one, without the deleted entries (it rewrites the index).
        conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES ('optimize')")

    def search(
        self, conn: sa.Connection, terms: Sequence[str], persona: str, scopes: Sequence[str], k: int
    ) -> list[tuple[int, float]]:
        return search(conn, terms, persona, scopes, k)
