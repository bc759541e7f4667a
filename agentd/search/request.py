"""What a search is asked (:class:`SearchQuery`) and what it answers (:class:`SearchResult`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from agentd.access.scopes import Reach, Scope
from agentd.search.intent import Asker
from agentd.search.ranking import MemoryHit

if TYPE_CHECKING:
    import numpy as np


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
class SearchQuery:
    """One search: the best memories for ``query`` within ``reach``, best first.

    ``limit`` defaults to ``[memory] search_results``; ``min_relevance`` to ``[memory] min_score``
    (automatic retrieval's thresholds, which depend on what the query asks of the asker; a given
    value applies to every memory alike, 0 for none). ``scopes`` narrows the search to those
    scopes (``None``: every scope ``reach`` sees). ``now`` is the moment recency and the dates a
    query names are read against (``None``: the clock). ``vector`` is the query's embedding when
    the caller has it (shared between searches). ``asker`` says what a follow-up asks of the
    asker (``None``: judged from the query's words). ``near_misses`` asks for up to that many of
    the best memories just below the threshold, at least ``near_floor`` relevant.
    """

    query: str
    reach: Reach
    limit: int | None = None
    min_relevance: float | None = None
    scopes: Sequence[Scope] | None = None
    now: datetime | None = None
    vector: np.ndarray | QueryVector | None = field(default=None, compare=False, repr=False)
    asker: Asker | None = None
    near_misses: int = 0
    near_floor: float = 0.0


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


@dataclass(frozen=True)
class SearchTimings:
    """Where a search's time went, in milliseconds (0 for a stage it did not run).

    ``words``: the full-text side; ``embed_wait``: waiting for the query's vector after that;
    ``vectors``: the nearest-vector side; ``rank``: fusion and ranking on ids and dates;
    ``load``: loading, filtering and reranking the winners (and the near misses); ``total``:
    the whole search, checks included.
    """

    words: float = 0.0
    embed_wait: float = 0.0
    vectors: float = 0.0
    rank: float = 0.0
    load: float = 0.0
    total: float = 0.0

    def as_json(self) -> dict[str, float]:
        """A JSON-ready dict, rounded to microseconds."""
        return {
            "words_ms": round(self.words, 3),
            "embed_wait_ms": round(self.embed_wait, 3),
            "vectors_ms": round(self.vectors, 3),
            "rank_ms": round(self.rank, 3),
            "load_ms": round(self.load, 3),
            "total_ms": round(self.total, 3),
        }


@dataclass(frozen=True)
class SearchResult:
    """What a search found: ``hits`` (best first), ``near_misses`` (the best below the threshold,
    when the request asked for them; shown, never injected), ``excluded`` (memories found but not
    usable in this channel, with the reason) and ``timings``. ``intent`` is what the query was read
    as asking (``none``: nothing to search by; ``about_user``: the user's own memories; ``topic``)."""

    hits: tuple[MemoryHit, ...] = ()
    near_misses: tuple[MemoryHit, ...] = ()
    excluded: tuple[Ineligible, ...] = ()
    timings: SearchTimings = SearchTimings()
    intent: str = "topic"
