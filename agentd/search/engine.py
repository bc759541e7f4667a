"""The one search: a :class:`~agentd.search.request.SearchQuery` in, a
:class:`~agentd.search.request.SearchResult` out.

``recall``, automatic retrieval, ``/search`` and ``/context``, the MCP tools, fact extraction and
``agentd memory search`` all search through :meth:`Searcher.search`. What the query asks decides
what is searched (:mod:`agentd.search.intent`): a query without a topic ("hello", "ok thanks!")
finds nothing; one about the user ("what do you know about me?", "what should I learn?") finds
the user's own memories (all of them, or their preferences), newest first, at
:data:`~agentd.search.ranking.INTENT_RELEVANCE`; any other query is a topic search, which fuses
the nearest vectors with the best full-text (bm25) matches of the query's content words, plus a
boost for memories created on a calendar day the query names (:mod:`agentd.search.fusion`,
:mod:`agentd.search.dates`). A memory without a content word ("a") is never a result.

Without ``min_relevance`` (automatic retrieval's thresholds), a memory about the user (user scope)
is a result only for a question that asks something of the asker
(:func:`~agentd.search.intent.asks_of_asker`; the request's ``asker`` says what instead, for a
follow-up seeded from the user's earlier messages): at ``memory.tuning.personal_min_score`` for a
question about them ("what's my dog called?"), at ``memory.tuning.advice_min_score`` for a decision or
advice for them ("Would a seafood paella be safe for me?": their memories compete by rank, and
the cross-encoder reorders them, :mod:`agentd.search.rerank`). "Why is the Dead Sea so salty?"
recalls none of them. A given ``min_relevance`` applies to every memory alike.

In a shared channel (``reach.shared_channel``) a user memory learned elsewhere is never a
result; the ones passed over are the result's ``excluded``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from agentd._exceptions import EmbedderError, EmbedderNotConfigured, InvalidInput
from agentd.access.scopes import Reach, Scope
from agentd.config import MemoryConfig
from agentd.embedders.guard import GuardedEmbedder
from agentd.embedders.reranker import CrossEncoder, shared_cross_encoder
from agentd.observe.log import get_logger
from agentd.search.dates import query_dates
from agentd.search.eligibility import eligible_ids
from agentd.search.fusion import Fusion
from agentd.search.intent import Asker, Facet, analyse, has_content, states_preference
from agentd.search.query import lexical_terms
from agentd.search.ranking import INTENT_RELEVANCE, Bar, MemoryHit, Ranked, Ranker
from agentd.search.recency import Recency
from agentd.search.request import Ineligible, QueryVector, SearchQuery, SearchResult, SearchTimings
from agentd.search.rerank import mixed_order
from agentd.search.subjects import names_of, reread_text
from agentd.store import Store
from agentd.store.schema import utcnow

if TYPE_CHECKING:
    import numpy as np

#: How a search finds candidates: both sides fused (what every search does), vectors only, words
#: only. The one-sided modes exist for measuring (:func:`with_mode`), never for an interface.
SearchMode = Literal["hybrid", "dense", "lexical"]
SEARCH_MODES: tuple[str, ...] = ("hybrid", "dense", "lexical")


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000


class Searcher:
    """Searches one store's memories with one embedder and the ``[memory]`` settings."""

    def __init__(
        self,
        store: Store,
        embedder: GuardedEmbedder | None,
        config: MemoryConfig,
        fusion: Fusion,
        check_persona: Callable[[str], str],
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._config = config
        self._fusion = fusion
        self._check_persona = check_persona
        self._recency = Recency(config.tuning.half_life_days, config.tuning.decay_weight)
        self._encoder_failed = False
        self._mode: SearchMode = "hybrid"

    @property
    def fusion(self) -> Fusion:
        """The hybrid-search weights in use (the embedder's own unless ``[memory.tuning]`` sets them)."""
        return self._fusion

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (raises :class:`EmbedderNotConfigured` without an embedder)."""
        vector: np.ndarray = self._require_embedder().embed_queries([text])[0]
        return vector

    def topic_vector(self, query: str, persona: str) -> QueryVector:
        """``query``'s embedding, begun now, for searches that share it; it has none when the
        query has no topic to search by ("hello", "ok thanks!"): then nothing embeds it."""
        if analyse(query, names=(persona,)).kind == "none":
            return QueryVector(None)
        return self._begin_query(query)

    def _begin_query(self, text: str) -> QueryVector:
        """The embedding of one query, begun now (raises :class:`EmbedderNotConfigured` without an embedder)."""
        wait = self._require_embedder().begin_queries([text])
        return QueryVector(lambda: wait()[0])

    def search(self, request: SearchQuery) -> SearchResult:
        """The best memories for the request (see the module's docstring), with the near misses it
        asked for, what was not eligible in its channel, and where the time went. The query is
        embedded only when the search needs its vector (a greeting or a question about the user
        does not)."""
        start = time.perf_counter()
        limit = self._checked(request)
        threshold = self._config.min_score if request.min_relevance is None else request.min_relevance
        now = request.now or utcnow()
        reach = request.reach
        intent = analyse(request.query, names=(reach.persona,), asker_names=names_of(reach.user) if reach.user else ())
        if intent.kind == "none":
            return SearchResult(timings=SearchTimings(total=_ms(start)), intent="none")
        excluded: list[Ineligible] = []
        if intent.kind == "about_user" and request.scopes is None:
            # Every such hit has the one intent relevance: at or above the threshold, or not found.
            hits = self._about_user(reach, intent.facet, limit, threshold, now, excluded)
            return SearchResult(tuple(hits), (), tuple(excluded), SearchTimings(total=_ms(start)), "about_user")
        searched = [str(s) for s in (reach.scopes() if request.scopes is None else request.scopes)]
        if request.scopes is not None and not searched:
            return SearchResult(timings=SearchTimings(total=_ms(start)))
        asks = intent.asker if request.asker is None else request.asker
        hits, near, timings = self._topic(request, limit, threshold, now, searched, asks, excluded)
        return SearchResult(tuple(hits), tuple(near), tuple(excluded), replace(timings, total=_ms(start)))

    def _topic(
        self,
        request: SearchQuery,
        limit: int,
        threshold: float,
        now: datetime,
        searched: list[str],
        asks: Asker,
        excluded: list[Ineligible],
    ) -> tuple[list[MemoryHit], list[MemoryHit], SearchTimings]:
        """A topic search: both sides' candidates fused, ranked, filtered and loaded."""
        embedder = self._require_embedder()
        query, reach, mode = request.query, request.reach, self._mode
        # Both sides fetch a bounded pool, so one search costs the same at any store size
        # (up to the index lookups themselves).
        pool = max(limit * 2, self._config.tuning.candidate_pool)
        use_words = mode != "dense" and self._fusion.lexical_weight > 0
        terms = lexical_terms(query) if use_words else []
        qvec: np.ndarray | QueryVector | None = None
        if mode != "lexical":
            qvec = self._begin_query(query) if request.vector is None else request.vector
        bar = self._bar(threshold, asks) if request.min_relevance is None else Bar.single(threshold)
        near_misses, near_floor = request.near_misses, request.near_floor
        floor = min(bar.lowest, near_floor) if near_misses > 0 else bar.lowest
        with self._store.read() as conn:
            # The full-text side first: SQLite reads it while the query is embedded (neither holds
            # the GIL), and only then is the vector waited for.
            t0 = time.perf_counter()
            matched = self._store.words.search(conn, terms, reach.persona, searched, pool) if terms else []
            t1 = time.perf_counter()
            if isinstance(qvec, QueryVector):
                qvec = qvec.get()
            t2 = time.perf_counter()
            nearest = self._store.vectors.nearest(conn, qvec, reach.persona, searched, pool) if qvec is not None else []
            t3 = time.perf_counter()
            candidates = self._fusion.merge(nearest, matched)
            # How much words count depends on whether the query names someone or something.
            fusion = self._fusion.for_query(query) if mode == "hybrid" else self._fusion
            days = query_dates(query, now.date()) if mode == "hybrid" and self._fusion.date_weight > 0 else ()
            # Rank on ids and dates; load whole rows (text, metadata) for the winners only.
            ranker = Ranker(embedder.calibration, self._recency, fusion)
            created = self._store.memories.created_at(conn, list(candidates))
            ranked = ranker.rank(candidates, created, now, min_relevance=floor, days=days)
            t4 = time.perf_counter()
            above = self._above(conn, ranked, bar, reach)
            if request.min_relevance is None and asks == "for" and bar.own is not None:
                above = self._reranked(conn, query, above, reach)
            hits = self._winners(conn, above, limit, reach, excluded, bar.admits)
            near: list[MemoryHit] = []
            if near_misses > 0:
                # Near-misses are shown, never injected: what is not eligible here is not shown either.
                below = [r for r in ranked if near_floor <= r.relevance < bar.highest]
                near = self._winners(
                    conn, below, near_misses, reach, None, lambda s, r: bar.shows_near(s, r, near_floor)
                )
            timings = SearchTimings(
                words=(t1 - t0) * 1000,
                embed_wait=(t2 - t1) * 1000,
                vectors=(t3 - t2) * 1000,
                rank=(t4 - t3) * 1000,
                load=_ms(t4),
            )
            return hits, near, timings

    def _above(self, conn: Any, ranked: list[Ranked], bar: Bar, reach: Reach) -> list[Ranked]:
        """The candidates that may clear ``bar``: below its general threshold, only the asker's own
        (looked up by id, so no other memory's row is loaded to be turned away)."""
        if bar.own is None or bar.own >= bar.general or reach.user is None:
            return [r for r in ranked if r.relevance >= bar.lowest]
        low = [r.id for r in ranked if bar.own <= r.relevance < bar.general]
        own = self._store.memories.in_scope(conn, low, Scope.user(reach.user)) if low else set()
        return [r for r in ranked if r.relevance >= bar.general or r.id in own]

    def _reranked(self, conn: Any, query: str, above: list[Ranked], reach: Reach) -> list[Ranked]:
        """``above`` with the asker's best ``memory.tuning.rerank_pool`` own memories (user scope) in the order
        of the cross-encoder mixed with the search's (:mod:`agentd.search.rerank`), in the places the
        search gave them; ``above`` as it is when reranking is off or the cross-encoder cannot be loaded.

        Only the asker's own are reordered: a decision rests on what constrains them, and the rest of
        a decision's candidates (channel and global memories) are ranked as any question's are."""
        if not self._config.rerank or reach.user is None or len(above) < 2:
            return above
        own = self._store.memories.in_scope(conn, [r.id for r in above], Scope.user(reach.user))
        head = [r for r in above if r.id in own][: self._config.tuning.rerank_pool]
        encoder = self._cross_encoder() if len(head) >= 2 else None
        if encoder is None:
            return above
        rows = self._store.memories.fetch(conn, [r.id for r in head])
        head = [r for r in head if r.id in rows]
        texts = [reread_text(rows[r.id].text, rows[r.id].scope) for r in head]
        try:
            cross = [float(c) for c in encoder.score(query, texts)]
        except (RuntimeError, ValueError) as exc:  # onnxruntime's failures: the decision keeps the search's order
            get_logger(__name__).warning("rerank.failed", error=str(exc), effect="the search's order is kept")
            return above
        order = iter(mixed_order(head, cross, self._config.tuning.rerank_weight))
        places = {r.id for r in head}
        return [next(order) if r.id in places else r for r in above]

    def _cross_encoder(self) -> CrossEncoder | None:
        """The shared cross-encoder, loaded on first use; ``None`` (logged once) when it cannot be."""
        if self._encoder_failed:
            return None
        try:
            return shared_cross_encoder()
        except (EmbedderError, ImportError, OSError) as exc:
            self._encoder_failed = True
            log = get_logger(__name__)
            log.warning("rerank.unavailable", error=str(exc), effect="decisions keep the search's order")
            return None

    def _checked(self, request: SearchQuery) -> int:
        """The search's limit, after the request is checked (InvalidInput names the bad field)."""
        query, limit = request.query, request.limit
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", "must not be empty")
        limit = self._config.search_results if limit is None else limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInput("limit", "must be a positive integer")
        self._check_persona(request.reach.persona)
        self._require_embedder()
        return limit

    def _bar(self, threshold: float, asks: Asker) -> Bar:
        """Automatic retrieval's thresholds (see the module's docstring)."""
        if threshold <= 0.0:
            return Bar.single(threshold)
        if asks == "none":
            return Bar(threshold, None)
        own = self._config.tuning.advice_min_score if asks == "for" else self._config.tuning.personal_min_score
        return Bar(threshold, min(threshold, own))

    def _winners(
        self,
        conn: Any,
        ranked: Sequence[Ranked],
        limit: int,
        reach: Reach,
        excluded: list[Ineligible] | None,
        keep: Callable[[Scope, float], bool],
    ) -> list[MemoryHit]:
        """The first ``limit`` of ``ranked`` that ``keep`` (by scope and relevance), that have content
        and that may be used in ``reach``, loaded (rows are read ``limit`` at a time)."""
        hits: list[MemoryHit] = []
        for start in range(0, len(ranked), limit):
            chunk = ranked[start : start + limit]
            rows = self._store.memories.fetch(conn, [r.id for r in chunk])
            relevance = {r.id: r.relevance for r in chunk}
            kept = [m for m in rows.values() if keep(m.scope, relevance[m.id])]
            allowed = eligible_ids(self._store, conn, reach, kept, excluded)
            for r in chunk:
                memory = rows.get(r.id)
                # A memory without a content word ("a", "ok") is close to everything in
                # embedding space; it never answers a query.
                if memory is not None and memory.id in allowed and has_content(memory.text):
                    hits.append(r.hit(memory))
                    if len(hits) == limit:
                        return hits
        return hits

    def _about_user(
        self,
        reach: Reach,
        facet: Facet,
        limit: int,
        threshold: float,
        now: datetime,
        excluded: list[Ineligible],
    ) -> list[MemoryHit]:
        """The user's own memories (``facet``: all, or their preferences), newest first."""
        if reach.user is None or threshold > INTENT_RELEVANCE:
            return []
        # The newest memories of the user answer "what do you know about me?"; preferences are
        # looked for further back, since only some memories are preferences.
        scan = max(limit, self._config.tuning.candidate_pool) * (1 if facet == "all" else 4)
        with self._store.read() as conn:
            memories = self._store.memories.page(conn, reach.persona, Scope.user(reach.user), scan)
            allowed = eligible_ids(self._store, conn, reach, memories, excluded)
            memories = [m for m in memories if m.id in allowed]
        hits = [
            MemoryHit(m, INTENT_RELEVANCE, INTENT_RELEVANCE * self._recency.factor(m.created_at, now))
            for m in memories
            if has_content(m.text) and (facet == "all" or states_preference(m.text, m.category))
        ]
        hits.sort(key=lambda h: (-h.score, -h.memory.created_at.timestamp(), -h.memory.id))
        return hits[:limit]

    def _require_embedder(self) -> GuardedEmbedder:
        if self._embedder is None:
            raise EmbedderNotConfigured(
                'no embedding model is configured ([embedding] provider = "none"); '
                'semantic memory search needs one: set provider = "local" or "litellm"'
            )
        return self._embedder


def with_mode(searcher: Searcher, mode: SearchMode) -> Searcher:
    """A searcher like ``searcher`` whose topic searches use one side only: ``"dense"`` (vectors)
    or ``"lexical"`` (full-text bm25), or both fused (``"hybrid"``, what every searcher does).

    The test and benchmark seam (bench/locomo.py, bench/longmemeval.py measure each side): no
    interface, no setting and no :class:`~agentd.search.request.SearchQuery` reaches it.
    """
    if mode not in SEARCH_MODES:
        raise InvalidInput("mode", f"must be one of {', '.join(SEARCH_MODES)}")
    twin = copy.copy(searcher)
    twin._mode = mode
    return twin
