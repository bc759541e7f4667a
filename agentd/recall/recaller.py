"""The one entry point a turn calls to recall: :meth:`Recaller.recall`.

A turn recalls, under one switch (``disable_memory`` on the request, ``[memory]
auto_retrieve``), in this order:

1. the user's earlier exchanges in this channel (:mod:`agentd.recall.earlier`, ``[history]``)
   that the transcript no longer carries, and the seeds they give, which join a sparse query;
2. memories (with the near misses and what was not eligible here) and episodes, by meaning,
   with one query vector and bounded in time (:mod:`agentd.recall.retrieval`), less the
   episodes the transcript carries;
3. the user's profile memories (``[memory] profile_tokens``, off by default; no embedder needed).

What the turn reads itself (the query's burst, the transcript, who reads the channel) comes in
the :class:`RecallRequest`; what was recalled goes back in one :class:`Recalled`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agentd.access.scopes import Reach
from agentd.config import Config
from agentd.memory.episodes import Episodes
from agentd.memory.service import MemoryService
from agentd.recall.earlier import EarlierExchanges, EarlierRecall, seeded_query
from agentd.recall.retrieval import Retrieval, Retriever
from agentd.recall.status import RecallStatus
from agentd.search.ranking import MemoryHit
from agentd.store import Store
from agentd.store.memories import Memory


@dataclass(frozen=True)
class RecallRequest:
    """What one turn asks recall for."""

    #: The query: the user's burst of messages, ending with the current one.
    query: str
    channel: str
    user: str | None
    #: Where the search may look (persona ∩ channel ∪ global ∪ user, per who reads the channel).
    reach: Reach
    #: Off: nothing is recalled (``disable_memory``, ``[memory] auto_retrieve = false``).
    enabled: bool = True
    #: How many memories (``None``: ``[memory] max_per_reply``).
    limit: int | None = None
    #: The stored current message: only older messages are recalled (``None``: a preview).
    before_id: int | None = None
    #: The oldest message the prompt's transcript carries (``None``: it carries none); what it
    #: carries is not recalled again.
    transcript_from: int | None = None


@dataclass(frozen=True)
class RecallTimes:
    """Milliseconds each step of recall took."""

    earlier_ms: float = 0.0
    #: Embedding the query and searching memories and episodes, as the caller waited for it.
    retrieval_ms: float = 0.0
    profile_ms: float = 0.0


@dataclass(frozen=True)
class Recalled:
    """Everything a turn recalled, and why each part holds what it holds."""

    #: The memory query: the request's, with the earlier exchanges' seeds when it was sparse.
    query: str
    #: The user's earlier exchanges (and the seeds, and how many messages were inspected).
    earlier: EarlierRecall
    earlier_status: RecallStatus
    #: Memories, near misses, the ineligible, every episode found; its status and time.
    retrieval: Retrieval
    #: The episodes the prompt may carry: those the transcript does not, at most ``[episodes] max_per_reply``.
    episodes: tuple[MemoryHit, ...] = ()
    profile: tuple[Memory, ...] = ()
    times: RecallTimes = field(default_factory=RecallTimes)

    @property
    def status(self) -> RecallStatus:
        """Why the memories are what they are (the ``MemoryContext`` event's status)."""
        return self.retrieval.status


class Recaller:
    """Recalls for a turn from the store, the memory service, the episodes and the config."""

    def __init__(
        self,
        config: Config,
        store: Store,
        retriever: Retriever,
        profiles: MemoryService | None = None,
        episodes: Episodes | None = None,
    ) -> None:
        self._config = config
        self._earlier = EarlierExchanges(store, config.history)
        self._retriever = retriever
        self._profiles = profiles
        self._episodes = episodes

    @property
    def episode_limit(self) -> int:
        """How many episodes a prompt may carry (0: episodes are not recalled)."""
        return self._config.episodes.max_per_reply if self._episodes is not None else 0

    def wants_transcript(self, query: str, user: str | None, enabled: bool) -> bool:
        """Whether :meth:`recall` will look at ``transcript_from`` (else the caller need not find it)."""
        earlier = self._config.history.enabled and user is not None
        return enabled and bool(query) and (earlier or self.episode_limit > 0)

    def recall(self, request: RecallRequest) -> Recalled:
        """Earlier exchanges, memories, episodes and the profile for ``request``; never raises for a
        failed or slow search (the statuses say what happened)."""
        cfg, req = self._config, request
        started = time.perf_counter()
        earlier, earlier_status, query = EarlierRecall(), RecallStatus.DISABLED, req.query
        if req.enabled and cfg.history.enabled and req.user is not None and query:
            earlier = self._earlier.recall(req.channel, req.user, query, req.before_id, req.transcript_from)
            earlier_status = RecallStatus.OK
            query = seeded_query(query, earlier, cfg.history.tuning.seed_sparse_below)
        earlier_at = time.perf_counter()
        limit = self.episode_limit
        retrieval = self._retriever.recall(
            query,
            req.reach,
            req.limit or cfg.memory.max_per_reply,
            enabled=req.enabled,
            # Some found may be in the transcript and left out: ask for a few more.
            episode_limit=limit * 2,
            # A follow-up seeded from the user's own earlier messages ("and a curry?") continues
            # their thread: it is about them, whatever its words.
            asker="about" if query != req.query else None,
        )
        episodes = _not_in_transcript(retrieval.episodes, req.channel, req.transcript_from)[:limit]
        retrieved_at = time.perf_counter()
        # The user's profile, given whatever the message; memory too, so opting out leaves it out.
        profile: tuple[Memory, ...] = ()
        if req.enabled and self._profiles is not None:
            mine = self._profiles.profile(req.reach.persona, req.user)
            profile = tuple(self._profiles.eligible(req.reach, mine)) if mine else ()
        times = RecallTimes(
            (earlier_at - started) * 1000,
            (retrieved_at - earlier_at) * 1000,
            (time.perf_counter() - retrieved_at) * 1000,
        )
        return Recalled(query, earlier, earlier_status, retrieval, episodes, profile, times)


def _not_in_transcript(
    hits: tuple[MemoryHit, ...], channel: str, oldest_in_prompt: int | None
) -> tuple[MemoryHit, ...]:
    """Episodes the prompt's transcript does not carry: from another channel (the user's other
    direct channels), or older than its oldest message (``None``: it carries none)."""
    if oldest_in_prompt is None:
        return hits
    return tuple(
        h
        for h in hits
        if (h.memory.metadata.get("episode") or {}).get("channel") != channel
        or (h.memory.source_message_id or 0) < oldest_in_prompt
    )
