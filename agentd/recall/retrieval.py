"""Automatic retrieval: best effort, bounded in time, never an error for the user."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from agentd._exceptions import AgentdError
from agentd.access.scopes import Reach
from agentd.memory import MemoryService
from agentd.memory.episodes import Episodes
from agentd.observe import tracing
from agentd.observe.log import get_logger
from agentd.recall import episodes as episode_search
from agentd.recall.status import RecallStatus
from agentd.search import Ineligible, MemoryHit, QueryVector, SearchQuery
from agentd.search.intent import Asker

log = get_logger("agentd.retrieval")

#: Near-misses shown with each reply: the best memories below the threshold...
NEAR_MISSES = 3
#: ...and at most this far below it (calibrated relevance).
NEAR_MISS_MARGIN = 0.4


@dataclass(frozen=True)
class Retrieval:
    """What retrieval found, or why it found nothing (``status``)."""

    hits: tuple[MemoryHit, ...]
    status: RecallStatus
    elapsed_ms: float
    query: str
    reason: str = ""
    #: The best memories below the threshold (never injected; shown as near-misses).
    near_misses: tuple[MemoryHit, ...] = ()
    #: Earlier exchanges recalled by meaning (:mod:`agentd.recall.episodes`), best first.
    episodes: tuple[MemoryHit, ...] = ()
    #: Memories found but not eligible in this channel (``agentd inspect`` says why).
    ineligible: tuple[Ineligible, ...] = ()


class Retriever:
    """Embeds the query once and searches, within ``timeout`` seconds, on a worker thread.

    The caller waits on a plain thread-pool future with a timeout (never on another
    actor), so a slow embedder costs at most the timeout and the reply goes on.
    """

    def __init__(
        self,
        memory: MemoryService | None,
        timeout: float,
        pool: ThreadPoolExecutor,
        episodes: Episodes | None = None,
    ) -> None:
        self._memory = memory
        self._timeout = timeout
        self._pool = pool
        self._episodes = episodes

    @tracing.spanned("retrieval")
    def recall(
        self,
        query: str,
        reach: Reach,
        limit: int,
        *,
        enabled: bool,
        episode_limit: int = 0,
        asker: Asker | None = None,
    ) -> Retrieval:
        """The best ``limit`` memories above the threshold, and the best ``episode_limit`` episodes
        (same query vector, same time limit), or an empty result with a status. ``asker``: whether
        the query is about the asker (``None``: judged from its words; MemoryService.search)."""
        if not enabled:
            return Retrieval((), RecallStatus.DISABLED, 0.0, query)
        if self._memory is None or self._memory.embedder is None:
            return Retrieval((), RecallStatus.UNAVAILABLE, 0.0, query, "no embedding model is configured")
        if not query.strip():
            return Retrieval((), RecallStatus.OK, 0.0, query)
        memory = self._memory
        load = getattr(memory.embedder, "load", None)
        start = time.perf_counter()
        try:
            if load is not None:
                # A model loaded on first use (agentd.app.LoadedOnFirstUse) is loaded before the
                # clock starts: its one-time load is not a slow query.
                load()
                start = time.perf_counter()
            episodes = self._episodes if episode_limit > 0 else None
            future = self._pool.submit(
                tracing.traced(_search, "search"), memory, query, reach, limit, episodes, episode_limit, asker
            )
            hits, near, found, ineligible = future.result(timeout=self._timeout)
        except FutureTimeout:
            future.cancel()
            elapsed = (time.perf_counter() - start) * 1000
            log.warning("retrieval_skipped", reason="timeout", timeout_s=self._timeout, persona=reach.persona)
            return Retrieval((), RecallStatus.TIMEOUT, elapsed, query, f"no answer within {self._timeout:g} s")
        except AgentdError as exc:
            elapsed = (time.perf_counter() - start) * 1000
            log.warning("retrieval_skipped", reason="error", code=exc.code, error=exc.message, persona=reach.persona)
            return Retrieval((), RecallStatus.ERROR, elapsed, query, exc.message)
        except Exception as exc:  # retrieval is best effort: no failure in the search path ends a turn
            elapsed = (time.perf_counter() - start) * 1000
            log.exception("retrieval_failed", error=repr(exc), persona=reach.persona)
            return Retrieval((), RecallStatus.ERROR, elapsed, query, f"{type(exc).__name__}: {exc}")
        elapsed = (time.perf_counter() - start) * 1000
        return Retrieval(
            tuple(hits),
            RecallStatus.OK,
            elapsed,
            query,
            near_misses=tuple(near),
            episodes=tuple(found),
            ineligible=tuple(ineligible),
        )


def _search(
    memory: MemoryService,
    query: str,
    reach: Reach,
    limit: int,
    episodes: Episodes | None = None,
    episode_limit: int = 0,
    asker: Asker | None = None,
) -> tuple[list[MemoryHit], list[MemoryHit], list[MemoryHit], list[Ineligible]]:
    """The hits above the threshold, up to :data:`NEAR_MISSES` just below it, the episodes, and
    what was not eligible in this channel.

    The query is embedded at most once: begun up front when episodes are searched too (same
    vector), else only when the memory search needs it; a greeting is never embedded.
    """
    vector = memory.searcher.topic_vector(query, reach.persona) if episodes is not None and episode_limit > 0 else None
    with memory.store.snapshot():  # one read transaction for both searches
        return _search_with(memory, query, reach, limit, episodes, episode_limit, vector, asker)


def _search_with(
    memory: MemoryService,
    query: str,
    reach: Reach,
    limit: int,
    episodes: Episodes | None,
    episode_limit: int,
    vector: QueryVector | None,
    asker: Asker | None,
) -> tuple[list[MemoryHit], list[MemoryHit], list[MemoryHit], list[Ineligible]]:
    threshold = memory.config.min_score
    request = SearchQuery(
        query,
        reach,
        limit,
        vector=vector,
        asker=asker,
        near_misses=NEAR_MISSES,
        near_floor=max(0.0, threshold - NEAR_MISS_MARGIN),
    )
    result = memory.search(request)
    found: list[MemoryHit] = []
    if episodes is not None:
        try:
            found = episode_search.search(episodes, query, reach, episode_limit, vector=vector)
        except AgentdError as exc:  # episodes are best effort too: the memories found still count
            log.warning("episodes_skipped", reason="error", code=exc.code, error=exc.message, persona=reach.persona)
    return list(result.hits), list(result.near_misses), found, list(result.excluded)
