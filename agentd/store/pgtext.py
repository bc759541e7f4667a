"""PostgreSQL full-text search over ``memory_words``, ranked by FTS5's bm25.

Each memory has one ``tsvector`` (text search configuration ``agentd``, a copy
of ``english``: Snowball stemming, as FTS5's porter): its text with weight A,
its ``metadata["context"]`` with weight B (after the text, so positions of
the text come first), and two position-less scope tokens, the same opaque
tokens as FTS5's ``skey`` column (:func:`agentd.store.lexical.scope_token`).
Every query is ``(allowed scope tokens) & (term | term …)``, so the GIN index
intersects posting lists and no other scope's rows are read, as with FTS5.

The score is FTS5's bm25 (k1 1.2, b 0.75, a context match weighted
:data:`CONTEXT_WEIGHT`, idf ``ln((N - n + 0.5) / (n + 0.5))``), so the fusion
weights are in the same units on both backends. PostgreSQL's own ``ts_rank``
has no idf; here it serves only to read a term's frequency: for a one-term
query and unit weights it is ``H2(tf) / (π²/6)`` with ``H2(n) = Σ 1/i²``
(``calc_rank_or`` in PostgreSQL's ``tsrank.c``), which this module inverts
exactly (``tf = round(1 / ((π²/6)(1 - rank)) - 1/2)``); with the context's
weight set to 0 it counts the text's occurrences alone. N and the total length
come from ``memory_words_stats``, kept in the same transaction as each insert
and delete; a term's document frequency n is counted by the GIN index.

The work of one query is bounded as for FTS5 (:data:`TERM_BUDGET`): past the
budget the commonest terms are dropped; counts of common terms are remembered
for :data:`COMMON_TTL` seconds.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from agentd.store.indexes import WordsRow
from agentd.store.lexical import persona_token, scope_token, within_budget

TABLE = "memory_words"
STATS = "memory_words_stats"
#: The text search configuration (created by migration 0001).
CONFIG = "agentd"
#: bm25 weight of a match in the context relative to one in the text (as FTS5's CONTEXT_WEIGHT).
CONTEXT_WEIGHT = 0.5
#: FTS5's bm25 constants.
K1 = 1.2
B = 0.75
#: At most this many postings for the terms of one query (see agentd.store.lexical.TERM_BUDGET); 0: no bound.
TERM_BUDGET = 20_000
#: How long a count of :data:`COMMON_MIN` or more postings is remembered; smaller counts are
#: cheap and always taken afresh, so small stores rank on exact statistics.
COMMON_TTL = 600.0
COMMON_MIN = 1000
_COMMON_MAX = 4096
_ZETA2 = math.pi**2 / 6

# engine -> {lexeme: (postings counted, exact, expires at)}
_common: weakref.WeakKeyDictionary[object, dict[str, tuple[int, bool, float]]] = weakref.WeakKeyDictionary()


def lexeme_query(lexeme: str) -> str:
    """A one-lexeme ``tsquery`` literal (quoted: no query syntax survives)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _tf(rank: str) -> str:
    # Inverse of ts_rank's H2(tf)/zeta(2) for a one-term query with unit weights (module docstring).
    return f"(CASE WHEN {rank} > 0 THEN round(1.0 / ({_ZETA2!r} * (1.0 - {rank}::float8)) - 0.5) ELSE 0 END)"


class PgText:
    """``memory_words`` as a :class:`~agentd.store.indexes.TextIndex`."""

    def insert(self, conn: sa.Connection, rows: Iterable[WordsRow]) -> None:
        ids, bodies, contexts, keys = [], [], [], []
        for mid, persona, scope, text, context in rows:
            ids.append(int(mid))
            bodies.append(text)
            contexts.append(context)
            keys.append(f"{persona_token(persona)} {scope_token(persona, scope)}")
        if not ids:
            return
        conn.exec_driver_sql(
            f"WITH ins AS (INSERT INTO {TABLE} (memory_id, words, length) "
            "SELECT r.id, v.words || r.skey::tsvector, "
            "(SELECT coalesce(max(p), 0) FROM unnest(v.words) AS u, unnest(u.positions) AS p) "
            "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) AS r(id, body, context, skey) "
            f"CROSS JOIN LATERAL (SELECT setweight(to_tsvector('{CONFIG}', r.body), 'A') || "
            f"setweight(to_tsvector('{CONFIG}', r.context), 'B') AS words) AS v "
            "RETURNING length) "
            f"UPDATE {STATS} SET documents = documents + (SELECT count(*) FROM ins), "
            "tokens = tokens + (SELECT coalesce(sum(length), 0) FROM ins) WHERE id = 1",
            (ids, bodies, contexts, keys),
        )

    def delete(self, conn: sa.Connection, memory_id: int) -> None:
        conn.exec_driver_sql(
            f"WITH del AS (DELETE FROM {TABLE} WHERE memory_id = %s RETURNING length) "
            f"UPDATE {STATS} SET documents = documents - (SELECT count(*) FROM del), "
            "tokens = tokens - (SELECT coalesce(sum(length), 0) FROM del) WHERE id = 1",
            (memory_id,),
        )

    def count(self, conn: sa.Connection) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar_one())

    def purge(self, conn: sa.Connection) -> None:
        """Nothing in the transaction: a deleted row's tsvector is gone from every query at commit, and
        its bytes from the files when VACUUM reclaims the row (docs/guides/privacy.md)."""

    def search(
        self, conn: sa.Connection, terms: Sequence[str], persona: str, scopes: Sequence[str], k: int
    ) -> list[tuple[int, float]]:
        if not terms:
            return []
        row = conn.exec_driver_sql(
            f"SELECT (SELECT array_agg(lexeme) FROM unnest(to_tsvector('{CONFIG}', %s))), documents, tokens "
            f"FROM {STATS} WHERE id = 1",
            ("\n".join(terms),),
        ).one()
        lexemes, documents, tokens = list(row[0] or []), int(row[1]), int(row[2])
        if not lexemes or documents < 1:
            return []
        df = self._frequencies(conn, lexemes)
        if TERM_BUDGET > 0:
            lexemes = within_budget(lexemes, df, TERM_BUDGET)
        for lexeme in lexemes:
            if df[lexeme] > TERM_BUDGET > 0:  # the rarest term, kept alone over the budget: count it exactly
                df[lexeme] = _postings(conn, [lexeme], None)[lexeme]
        keys = [scope_token(persona, s) for s in scopes] if scopes else [persona_token(persona)]
        match = f"({' | '.join(keys)}) & ({' | '.join(lexeme_query(x) for x in lexemes)})"
        avgdl = tokens / documents
        ranks, parts, params = [], [], []
        for i, lexeme in enumerate(lexemes):
            q = lexeme_query(lexeme)
            ranks.append(f"ts_rank('{{0,0,0,1}}', w.words, %s::tsquery) AS a{i}")
            ranks.append(f"ts_rank('{{1,1,1,1}}', w.words, %s::tsquery) AS t{i}")
            params += [q, q]
            n = df[lexeme]
            idf = max(math.log((documents - n + 0.5) / (n + 0.5)), 1e-6)
            body, total = _tf(f"r.a{i}"), _tf(f"r.t{i}")
            weight = f"({body} + {CONTEXT_WEIGHT!r} * ({total} - {body}))"
            parts.append(
                f"{idf!r} * {weight} * {K1 + 1!r} / ({weight} + {K1!r} * (1 - {B!r} + {B!r} * w.length / {avgdl!r}))"
            )
        sql = (
            f"SELECT w.memory_id, {' + '.join(parts)} AS score FROM {TABLE} AS w "
            f"CROSS JOIN LATERAL (SELECT {', '.join(ranks)}) AS r "
            "WHERE w.words @@ %s::tsquery ORDER BY score DESC, w.memory_id LIMIT %s"
        )
        rows = conn.exec_driver_sql(sql, (*params, match, k)).fetchall()
        return [(int(mid), float(score)) for mid, score in rows]

    def _frequencies(self, conn: sa.Connection, lexemes: Sequence[str]) -> dict[str, int]:
        """Document frequency of each lexeme, counted up to the budget (past it: "common"), in one query."""
        cache = _common.setdefault(conn.engine, {})
        now = time.monotonic()
        cap = TERM_BUDGET + 1 if TERM_BUDGET > 0 else None
        found: dict[str, int] = {}
        for lexeme in lexemes:
            seen = cache.get(lexeme)
            if seen is not None and seen[2] > now and (seen[1] or (cap is not None and seen[0] >= cap)):
                found[lexeme] = seen[0]
        for lexeme, n in _postings(conn, [x for x in lexemes if x not in found], cap).items():
            found[lexeme] = n
            if n >= COMMON_MIN:
                if len(cache) >= _COMMON_MAX:
                    cache.clear()
                cache[lexeme] = (n, cap is None or n < cap, now + COMMON_TTL)
        return found


def _postings(conn: sa.Connection, lexemes: Sequence[str], cap: int | None) -> dict[str, int]:
    """How many memories hold each lexeme (in text or context), counted up to ``cap``: one round trip."""
    if not lexemes:
        return {}
    matches = f"SELECT 1 FROM {TABLE} WHERE words @@ q.query"
    if cap is not None:
        matches += f" LIMIT {int(cap)}"
    rows = conn.exec_driver_sql(
        f"SELECT q.lexeme, (SELECT count(*) FROM ({matches}) AS c) "
        "FROM unnest(%s::text[], %s::tsquery[]) AS q(lexeme, query)",
        (list(lexemes), [lexeme_query(x) for x in lexemes]),
    )
    return {str(lexeme): int(n) for lexeme, n in rows}
