"""The memory service: add, search, list, forget, import and re-embed memories.

Everything that reads or writes memories goes through here (the CLI, the
skills, the actors, the HTTP API), so validation, scoping and ranking are the
same everywhere.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentd._exceptions import EmbedderError, EmbedderNotConfigured, InvalidInput, NotFound
from agentd.access.scopes import Reach, Scope, is_blank
from agentd.config import MemoryConfig
from agentd.embedders import Embedder
from agentd.embedders.guard import GuardedEmbedder, guarded
from agentd.embedders.reranker import CrossEncoder, shared_cross_encoder
from agentd.memory.dates import query_dates
from agentd.memory.fusion import Fusion
from agentd.memory.importer import ImportReport, parse_line, read_lines
from agentd.memory.intent import Asker, Facet, analyse, has_content, states_preference
from agentd.memory.query import lexical_terms
from agentd.memory.ranking import INTENT_RELEVANCE, Bar, MemoryHit, Ranked, rank
from agentd.memory.rerank import mixed_order
from agentd.memory.subjects import indexed_text, names_of, reread_text
from agentd.observe.log import get_logger
from agentd.relevance import DEFAULT_WORDS, Recency
from agentd.store import Store
from agentd.store.jobs import Revision
from agentd.store.lexical import CONTEXT_KEY
from agentd.store.memories import Memory, NewMemory
from agentd.store.schema import utcnow

if TYPE_CHECKING:
    import numpy as np

_CATEGORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")
#: How far in the future a memory's ``created_at`` may be (clocks disagree a little, not by years).
MAX_FUTURE = timedelta(days=1)
#: ``progress(done, total)`` callbacks for long operations.
Progress = Callable[[int, int], None]
#: How a search finds candidates: both sides fused (the default), vectors only, words only.
SearchMode = Literal["hybrid", "dense", "lexical"]
SEARCH_MODES: tuple[str, ...] = ("hybrid", "dense", "lexical")
#: How many of a user's newest memories the profile is gathered from (bounds the work).
PROFILE_SCAN = 500


class QueryVector:
    """A query's embedding, begun on the embedder's thread and waited for where a search first
    needs it (within the embedder's timeout, counted from the start), so that a search reads
    its full-text matches meanwhile; searches that share it wait for it once. ``None`` when the
    query has no topic to search by: then nothing embeds it."""

    def __init__(self, wait: Callable[[], np.ndarray] | None) -> None:
        self._wait = wait
        self._lock = threading.Lock()
        self._vector: np.ndarray | None = None
        self._error: Exception | None = None

    def get(self) -> np.ndarray | None:
        """The vector (the first call waits for it); the embedder's error, every time, if it failed."""
        with self._lock:
            if self._wait is not None:
                wait, self._wait = self._wait, None
                try:
                    self._vector = wait()
                except Exception as exc:
                    self._error = exc
            if self._error is not None:
                raise self._error
            return self._vector


@dataclass(frozen=True)
class Ineligible:
    """A memory a search found but could not use here (:meth:`agentd.access.scopes.Reach.eligible`)."""

    id: int
    scope: str
    learned_in: str | None
    reason: str

    def as_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"id": self.id, "scope": self.scope, "learned_in": self.learned_in, "reason": self.reason}


def _no_progress(_done: int, _total: int) -> None:
    pass


class MemoryService:
    """Validated, scoped access to memories, with the injected embedder."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        config: MemoryConfig,
        personas: Collection[str] | None = None,
        check_embedding: bool = True,
    ) -> None:
        self._store = store
        # Every vector that reaches the store passes the boundary: bounded in time, finite, unit length.
        self._embedder = guarded(embedder)
        self._config = config
        self._personas = personas
        self._recency = Recency(config.half_life_days, config.decay_weight)
        self._fusion = Fusion.of(embedder.words if embedder is not None else DEFAULT_WORDS, config)
        self._encoder_failed = False
        if embedder is not None and check_embedding:
            store.bind_embedding(embedder.model_id, embedder.dimension)

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use (``None``: semantic search is unavailable)."""
        return self._embedder

    @property
    def store(self) -> Store:
        """The store the memories are in."""
        return self._store

    @property
    def fusion(self) -> Fusion:
        """The hybrid-search weights in use (the embedder's own unless ``[memory]`` sets them)."""
        return self._fusion

    @property
    def config(self) -> MemoryConfig:
        """The ``[memory]`` settings."""
        return self._config

    # -- validation ------------------------------------------------------------

    def check_persona(self, persona: str) -> str:
        """Raise :class:`NotFound` for a persona agentd does not know."""
        if not isinstance(persona, str) or not persona:
            raise InvalidInput("persona", "must be a non-empty string")
        if self._personas is not None and persona not in self._personas:
            known = ", ".join(sorted(self._personas)) or "none"
            raise NotFound("persona", persona, f"known personas: {known}")
        return persona

    def validate(self, item: NewMemory) -> NewMemory:
        """Check one new memory; return it with its text stripped."""
        self.check_persona(item.persona)
        if not isinstance(item.text, str):
            raise InvalidInput("text", "must be a string")
        text = item.text.strip()
        if is_blank(text):
            raise InvalidInput("text", "must not be empty, whitespace or invisible characters only")
        if len(text) > self._config.max_text_chars:
            raise InvalidInput(
                "text", f"is {len(text)} characters; the limit is {self._config.max_text_chars} (memory.max_text_chars)"
            )
        if not isinstance(item.category, str) or not _CATEGORY.match(item.category):
            raise InvalidInput("category", "must be 1-64 letters, digits, spaces, '_', '.' or '-'")
        if not isinstance(item.metadata, dict):
            raise InvalidInput("metadata", "must be a JSON object")
        context = item.metadata.get(CONTEXT_KEY)
        if context is not None and (not isinstance(context, str) or len(context) > self._config.max_text_chars):
            raise InvalidInput(
                f"metadata.{CONTEXT_KEY}",
                f"must be a string of at most {self._config.max_text_chars} characters",
            )
        if not isinstance(item.scope, Scope):
            raise InvalidInput("scope", "must be global, channel:NAME or user:ID")
        if item.created_at is not None and item.created_at > utcnow() + MAX_FUTURE:
            # A memory from the far future would never decay, and would outrank everything for ever.
            raise InvalidInput(
                "created_at", f"is {item.created_at.isoformat()}, in the future; at most a day ahead of now is accepted"
            )
        return replace(item, text=text)

    # -- writing -----------------------------------------------------------------

    def add(
        self,
        persona: str,
        scope: Scope,
        text: str,
        category: str = "fact",
        metadata: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        source_message_id: int | None = None,
    ) -> tuple[Memory, bool]:
        """Store one memory; return it and whether it was new (False: an identical one exists)."""
        item = self.validate(NewMemory(persona, scope, category, text, metadata or {}, created_at, source_message_id))
        ((mid, created),) = self.add_many([item])
        with self._store.read() as conn:
            memory = self._store.memories.get(conn, mid)
        assert memory is not None
        return memory, created

    def add_many(self, items: Sequence[NewMemory], also: Callable[[Any], None] | None = None) -> list[tuple[int, bool]]:
        """Store already-validated memories in one transaction; embeds them in one batch.

        A memory's ``metadata["context"]`` is indexed for full-text search with
        it, never shown (see :func:`agentd.store.lexical.context_of`). A user's memory is
        embedded without a leading subject that names the user (:mod:`agentd.memory.subjects`). ``also(conn)``
        runs in the same transaction (a background job moves its cursor there).
        """
        vecs = (
            self._embed([indexed_text(i.text, i.scope) for i in items])
            if self._embedder is not None and items
            else None
        )
        with self._store.write() as conn:
            added = self._store.memories.add(conn, items, vecs) if items else []
            if also is not None:
                also(conn)
            return added

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray | None:
        """Embed memory texts (``None`` without an embedder): for writes made in one transaction later."""
        return self._embed(texts) if self._embedder is not None and texts else None

    def forget(self, memory_id: int) -> Memory:
        """Delete one memory: its row, vector and index entry."""
        with self._store.write() as conn:
            memory = self._store.memories.get(conn, memory_id)
            if memory is None:
                raise NotFound("memory", memory_id)
            self._store.memories.delete(conn, memory_id)
        return memory

    def import_jsonl(
        self,
        path: Path,
        default_persona: str | None = None,
        progress: Progress = _no_progress,
        batch: int = 256,
        strict: bool = False,
    ) -> ImportReport:
        """Import a JSONL file (UTF-8, a byte order mark allowed); each bad line, bad UTF-8
        included, is reported with its number and skipped, or with ``strict`` refuses the
        whole file (nothing is imported)."""
        report = ImportReport()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput("file", f"cannot read {path}: {exc.strerror}") from exc
        valid: list[NewMemory] = []
        for number, raw in read_lines(data):
            if isinstance(raw, InvalidInput):
                report.skipped.append((number, str(raw)))
                continue
            try:
                valid.append(parse_line(raw, default_persona, self.validate))
            except (InvalidInput, NotFound) as exc:
                report.skipped.append((number, str(exc)))
        if strict and report.skipped:
            report.refused = True
            return report
        total = len(valid)
        progress(0, total)
        for start in range(0, total, batch):
            chunk = valid[start : start + batch]
            for _mid, created in self.add_many(chunk):
                if created:
                    report.added += 1
                else:
                    report.duplicates += 1
            progress(min(start + batch, total), total)
        return report

    def reembed(self, progress: Progress = _no_progress, batch: int = 256) -> int:
        """Rebuild every vector with the configured embedder; return how many were embedded.

        The store is re-bound to the configured model. Vectors are staged batch by
        batch beside the live ones and swapped in one transaction at the end.
        """
        embedder = self._require_embedder()
        vectors = self._store.vectors
        with self._store.write() as conn:
            vectors.begin_rebuild(conn, embedder.dimension)
            total = self._store.memories.count(conn)
        progress(0, total)
        done = 0
        with self._store.read() as reader:
            batches = list(self._store.memories.iter_all(reader, batch))
        for mems in batches:
            vecs = self._embed([indexed_text(m.text, m.scope) for m in mems])
            with self._store.write() as conn:
                vectors.insert_staged(
                    conn, [(m.id, m.persona, str(m.scope), v) for m, v in zip(mems, vecs, strict=True)]
                )
            done += len(mems)
            progress(done, total)
        with self._store.write() as conn:
            self._store.rebind_embedding(conn, embedder.model_id, embedder.dimension)
            # Memories added while re-embedding ran are embedded now.
            late = vectors.missing(conn)
            if late:
                mems = list(self._store.memories.fetch(conn, late).values())
                vecs = self._embed([indexed_text(m.text, m.scope) for m in mems])
                vectors.insert(conn, [(m.id, m.persona, str(m.scope), v) for m, v in zip(mems, vecs, strict=True)])
                done += len(mems)
        return done

    # -- reading -----------------------------------------------------------------

    def get(self, memory_id: int) -> Memory:
        """One memory by id."""
        with self._store.read() as conn:
            memory = self._store.memories.get(conn, memory_id)
        if memory is None:
            raise NotFound("memory", memory_id)
        return memory

    def list_memories(
        self, persona: str, scope: Scope | None = None, limit: int = 100, offset: int = 0
    ) -> list[Memory]:
        """A persona's memories, newest first (episodes only when ``scope`` is an episodes scope)."""
        self.check_persona(persona)
        with self._store.read() as conn:
            return self._store.memories.page(conn, persona, scope, limit, offset)

    def revisions(self, memory_id: int) -> list[Revision]:
        """A memory's revisions (fact extraction's decisions), oldest first; :class:`NotFound` when
        there is neither such a memory nor any revision of it."""
        with self._store.read() as conn:
            entries = self._store.memory_history.of(conn, memory_id)
            if not entries and self._store.memories.get(conn, memory_id) is None:
                raise NotFound("memory", memory_id)
        return entries

    def count(self, persona: str | None = None) -> int:
        """How many memories are stored (episodes are not counted)."""
        with self._store.read() as conn:
            return self._store.memories.count(conn, persona, episodes=False)

    def profile(self, persona: str, user: str | None) -> tuple[Memory, ...]:
        """The user's profile: their own memories (user scope) in ``memory.profile_categories``,
        newest first, at most :data:`PROFILE_SCAN` of their newest memories looked at; empty when
        ``memory.profile_tokens`` is 0 or there is no user. Memories without content are left out.
        The prompt assembler fits as many as ``profile_tokens`` allows."""
        if not self._config.profile_tokens or user is None:
            return ()
        self.check_persona(persona)
        wanted = {c.casefold() for c in self._config.profile_categories}
        with self._store.read() as conn:
            memories = self._store.memories.page(conn, persona, Scope.user(user), PROFILE_SCAN)
        return tuple(m for m in memories if m.category.casefold() in wanted and has_content(m.text))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (raises :class:`EmbedderNotConfigured` without an embedder)."""
        vector: np.ndarray = self._require_embedder().embed_queries([text])[0]
        return vector

    def topic_vector(self, query: str, persona: str) -> QueryVector:
        """``query``'s embedding, begun now, for searches that share it; it has none when the
        query has no topic to search by ("hello", "ok thanks!"): then nothing embeds it (see
        :meth:`search`)."""
        if analyse(query, names=(persona,)).kind == "none":
            return QueryVector(None)
        return self._begin_query(query)

    def _begin_query(self, text: str) -> QueryVector:
        """The embedding of one query, begun now (raises :class:`EmbedderNotConfigured` without an embedder)."""
        wait = self._require_embedder().begin_queries([text])
        return QueryVector(lambda: wait()[0])

    def search(
        self,
        query: str,
        reach: Reach,
        limit: int | None = None,
        min_relevance: float | None = None,
        vector: np.ndarray | QueryVector | None = None,
        now: datetime | None = None,
        mode: SearchMode = "hybrid",
        scopes: Sequence[Scope] | None = None,
        excluded: list[Ineligible] | None = None,
        asker: Asker | None = None,
    ) -> list[MemoryHit]:
        """The best memories for ``query`` within ``reach``, best first.

        ``limit`` defaults to ``memory.recall_limit``, ``min_relevance`` to
        ``memory.min_score`` (automatic retrieval's threshold; pass 0 for none).
        Pass ``vector`` when the query is already embedded.

        What the query asks decides what is searched (agentd/memory/intent.py):
        a query without a topic ("hello", "ok thanks!") finds nothing; one about
        the user ("what do you know about me?", "what should I learn?") finds the
        user's own memories (all of them, or their preferences), newest first, at
        :data:`~agentd.memory.ranking.INTENT_RELEVANCE`; any other query is a
        topic search. A memory without a content word ("a") is never a result.

        Topic search: ``mode`` is for measuring (bench/locomo.py): ``"hybrid"``
        fuses the nearest vectors with the best full-text (bm25) matches of the
        query's content words, plus a boost for memories created on a calendar day
        the query names (:mod:`agentd.memory.fusion`); ``"dense"`` and
        ``"lexical"`` use one side only.

        Without ``min_relevance`` (automatic retrieval's thresholds), a memory about the user
        (user scope) is a result only for a question that asks something of the asker
        (:func:`~agentd.memory.intent.asks_of_asker`; ``asker`` says what instead, for a follow-up
        seeded from the user's earlier messages): at ``memory.personal_min_score`` for a question
        about them ("what's my dog called?"), at ``memory.advice_min_score`` for a decision or
        advice for them ("Would a seafood paella be safe for me?": their memories compete by rank).
        "Why is the Dead Sea so salty?" recalls none of them. A given ``min_relevance`` applies to
        every memory alike.

        In a shared channel (``reach.shared_channel``) a user memory learned elsewhere
        is never a result; the ones passed over are appended to ``excluded`` when given.
        """
        hits, _near = self.search_near(
            query,
            reach,
            limit,
            min_relevance,
            vector=vector,
            now=now,
            mode=mode,
            scopes=scopes,
            excluded=excluded,
            asker=asker,
        )
        return hits

    def search_near(
        self,
        query: str,
        reach: Reach,
        limit: int | None = None,
        min_relevance: float | None = None,
        *,
        near_misses: int = 0,
        near_floor: float = 0.0,
        vector: np.ndarray | QueryVector | None = None,
        now: datetime | None = None,
        mode: SearchMode = "hybrid",
        scopes: Sequence[Scope] | None = None,
        excluded: list[Ineligible] | None = None,
        asker: Asker | None = None,
    ) -> tuple[list[MemoryHit], list[MemoryHit]]:
        """:meth:`search`, and in the same pass up to ``near_misses`` of the best memories just
        below the threshold (relevance at least ``near_floor``): what automatic retrieval shows
        as near-misses. The hits are exactly what :meth:`search` returns. The query is embedded
        only when the search needs its vector (a greeting or a question about the user does not).
        """
        limit = self._checked(query, reach, limit, mode)
        embedder = self._require_embedder()
        threshold = self._config.min_score if min_relevance is None else min_relevance
        now = now or utcnow()
        intent = analyse(query, names=(reach.persona,), asker_names=names_of(reach.user) if reach.user else ())
        if intent.kind == "none":
            return [], []
        if intent.kind == "about_user" and scopes is None:
            # Every such hit has the one intent relevance: at or above the threshold, or not found.
            return self._about_user(reach, intent.facet, limit, threshold, now, excluded), []
        searched = [str(s) for s in (reach.scopes() if scopes is None else scopes)]
        if scopes is not None and not searched:
            return [], []
        # Both sides fetch a bounded pool, so one search costs the same at any store size
        # (up to the index lookups themselves).
        pool = max(limit * 2, self._config.candidate_pool)
        use_words = mode != "dense" and self._fusion.lexical_weight > 0
        terms = lexical_terms(query) if use_words else []
        qvec: np.ndarray | QueryVector | None = None
        if mode != "lexical":
            qvec = self._begin_query(query) if vector is None else vector
        asks = intent.asker if asker is None else asker
        bar = self._bar(threshold, asks) if min_relevance is None else Bar.single(threshold)
        floor = min(bar.lowest, near_floor) if near_misses > 0 else bar.lowest
        with self._store.read() as conn:
            # The full-text side first: SQLite reads it while the query is embedded (neither holds
            # the GIL), and only then is the vector waited for.
            matched = self._store.words.search(conn, terms, reach.persona, searched, pool) if terms else []
            if isinstance(qvec, QueryVector):
                qvec = qvec.get()
            nearest = self._store.vectors.nearest(conn, qvec, reach.persona, searched, pool) if qvec is not None else []
            candidates = self._fusion.merge(nearest, matched)
            # How much words count depends on whether the query names someone or something.
            fusion = self._fusion.for_query(query) if mode == "hybrid" else self._fusion
            # Rank on ids and dates; load whole rows (text, metadata) for the winners only.
            ranked = rank(
                candidates,
                self._store.memories.created_at(conn, list(candidates)),
                embedder.calibration,
                self._recency,
                now,
                None,
                floor,
                fusion,
                query_dates(query, now.date()) if mode == "hybrid" and self._fusion.date_weight > 0 else (),
            )
            above = self._above(conn, ranked, bar, reach)
            if min_relevance is None and asks == "for" and bar.own is not None:
                above = self._reranked(conn, query, above, reach)
            hits = self._winners(conn, above, limit, reach, excluded, bar.admits)
            near: list[MemoryHit] = []
            if near_misses > 0:
                # Near-misses are shown, never injected: what is not eligible here is not shown either.
                below = [r for r in ranked if near_floor <= r.relevance < bar.highest]
                near = self._winners(
                    conn, below, near_misses, reach, None, lambda s, r: bar.shows_near(s, r, near_floor)
                )
            return hits, near

    def _above(self, conn: Any, ranked: list[Ranked], bar: Bar, reach: Reach) -> list[Ranked]:
        """The candidates that may clear ``bar``: below its general threshold, only the asker's own
        (looked up by id, so no other memory's row is loaded to be turned away)."""
        if bar.own is None or bar.own >= bar.general or reach.user is None:
            return [r for r in ranked if r.relevance >= bar.lowest]
        low = [r.id for r in ranked if bar.own <= r.relevance < bar.general]
        own = self._store.memories.in_scope(conn, low, Scope.user(reach.user)) if low else set()
        return [r for r in ranked if r.relevance >= bar.general or r.id in own]

    def _reranked(self, conn: Any, query: str, above: list[Ranked], reach: Reach) -> list[Ranked]:
        """``above`` with the asker's best ``memory.rerank_pool`` own memories (user scope) in the order
        of the cross-encoder mixed with the search's (:mod:`agentd.memory.rerank`), in the places the
        search gave them; ``above`` as it is when reranking is off or the cross-encoder cannot be loaded.

        Only the asker's own are reordered: a decision rests on what constrains them, and the rest of
        a decision's candidates (channel and global memories) are ranked as any question's are."""
        if not self._config.rerank or reach.user is None or len(above) < 2:
            return above
        own = self._store.memories.in_scope(conn, [r.id for r in above], Scope.user(reach.user))
        head = [r for r in above if r.id in own][: self._config.rerank_pool]
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
        order = iter(mixed_order(head, cross, self._config.rerank_weight))
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

    def _checked(self, query: str, reach: Reach, limit: int | None, mode: str) -> int:
        """The search's limit, after its arguments are checked (InvalidInput names the bad one)."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", "must not be empty")
        limit = self._config.recall_limit if limit is None else limit
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidInput("limit", "must be a positive integer")
        if mode not in SEARCH_MODES:
            raise InvalidInput("mode", f"must be one of {', '.join(SEARCH_MODES)}")
        self.check_persona(reach.persona)
        return limit

    def _bar(self, threshold: float, asks: Asker) -> Bar:
        """Automatic retrieval's thresholds (see :meth:`search`)."""
        if threshold <= 0.0:
            return Bar.single(threshold)
        if asks == "none":
            return Bar(threshold, None)
        own = self._config.advice_min_score if asks == "for" else self._config.personal_min_score
        return Bar(threshold, min(threshold, own))

    # -- internals -----------------------------------------------------------------

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
            allowed = self._eligible(conn, reach, kept, excluded)
            for r in chunk:
                memory = rows.get(r.id)
                # A memory without a content word ("a", "ok") is close to everything in
                # embedding space; it never answers a query.
                if memory is not None and memory.id in allowed and has_content(memory.text):
                    hits.append(r.hit(memory))
                    if len(hits) == limit:
                        return hits
        return hits

    def eligible(self, reach: Reach, memories: Sequence[Memory]) -> list[Memory]:
        """The ``memories`` that may be used in ``reach`` (see :meth:`agentd.access.scopes.Reach.eligible`)."""
        if reach.shared_channel is None:
            return list(memories)
        with self._store.read() as conn:
            allowed = self._eligible(conn, reach, memories, None)
        return [m for m in memories if m.id in allowed]

    def _eligible(
        self, conn: Any, reach: Reach, memories: Sequence[Memory], excluded: list[Ineligible] | None
    ) -> set[int]:
        if reach.shared_channel is None:
            return {m.id for m in memories}
        users = [m.id for m in memories if m.scope.kind == "user"]
        origins = self._store.memories.learned_in(conn, users) if users else {}
        allowed: set[int] = set()
        for m in memories:
            learned = origins.get(m.id)
            reason = reach.eligible(m.scope, learned)
            if reason is None:
                allowed.add(m.id)
            elif excluded is not None:
                excluded.append(Ineligible(m.id, str(m.scope), learned, reason))
        return allowed

    def _about_user(
        self,
        reach: Reach,
        facet: Facet,
        limit: int,
        threshold: float,
        now: datetime,
        excluded: list[Ineligible] | None = None,
    ) -> list[MemoryHit]:
        """The user's own memories (``facet``: all, or their preferences), newest first."""
        if reach.user is None or threshold > INTENT_RELEVANCE:
            return []
        # The newest memories of the user answer "what do you know about me?"; preferences are
        # looked for further back, since only some memories are preferences.
        scan = max(limit, self._config.candidate_pool) * (1 if facet == "all" else 4)
        with self._store.read() as conn:
            memories = self._store.memories.page(conn, reach.persona, Scope.user(reach.user), scan)
            allowed = self._eligible(conn, reach, memories, excluded)
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

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """The passages' vectors, a text repeated in the batch embedded once (an import may repeat one
        thousands of times: the same vector each time, for a fraction of the time)."""
        embedder = self._require_embedder()
        unique = list(dict.fromkeys(texts))
        if len(unique) == len(texts):
            return embedder.embed(list(texts))
        position = {text: i for i, text in enumerate(unique)}
        vectors: np.ndarray = embedder.embed(unique)[[position[t] for t in texts]]
        return vectors
