"""Recalling episodes (:mod:`agentd.memory.episodes`): earlier exchanges found by meaning."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.access.scopes import Reach
from agentd.memory.episodes import Episodes
from agentd.search import QueryVector, SearchQuery
from agentd.search.ranking import MemoryHit

if TYPE_CHECKING:
    import numpy as np


def search(
    episodes: Episodes, query: str, reach: Reach, limit: int, vector: np.ndarray | QueryVector | None = None
) -> list[MemoryHit]:
    """The best episodes for ``query`` a turn at ``reach`` may recall."""
    # In a channel others read (``reach.shared_channel``) a user's private exchanges never surface.
    direct = (
        reach.channel is not None and reach.shared_channel is None and episodes.is_direct(reach.channel, reach.user)
    )
    scopes = reach.episode_scopes(direct)
    if limit < 1 or not scopes or not query.strip():
        return []
    memory = episodes.memory
    threshold = episodes.config.min_score if episodes.config.min_score is not None else memory.config.min_score
    request = SearchQuery(query, reach, limit, min_relevance=threshold, scopes=scopes, vector=vector)
    return list(memory.search(request).hits)
