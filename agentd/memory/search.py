"""Ranking: from raw candidates to calibrated, time-decayed hits.

This is the one search function behind ``recall``, automatic retrieval, the
memory service's ``/search`` and ``/context``, and ``agentd memory search``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.relevance import Calibration, Recency
from agentd.store.memories import Memory


@dataclass(frozen=True)
class MemoryHit:
    """One memory found by a search.

    ``relevance`` is the calibrated match quality in [0, 1] (what thresholds
    apply to); ``score`` is relevance scaled by recency (what ranks).
    """

    memory: Memory
    relevance: float
    score: float
    similarity: float | None = None

    def as_result(self) -> dict[str, Any]:
        """Seed 002's result item, plus id, scope, relevance and metadata."""
        return {
            "id": self.memory.id,
            "text": self.memory.text,
            "category": self.memory.category,
            "score": round(self.score, 4),
            "relevance": round(self.relevance, 4),
            "created_at": self.memory.created_at.isoformat().replace("+00:00", "Z"),
            "scope": str(self.memory.scope),
            "metadata": self.memory.metadata,
        }


def rank(
    candidates: dict[int, float],
    memories: dict[int, Memory],
    calibration: Calibration,
    recency: Recency,
    now: datetime,
    limit: int,
    min_relevance: float,
) -> list[MemoryHit]:
    """Turn ``{memory_id: cosine}`` into the best ``limit`` hits at or above ``min_relevance``.

    Ties break on newer memory, then on id, so results are deterministic.
    """
    hits: list[MemoryHit] = []
    for mid, cosine in candidates.items():
        mem = memories.get(mid)
        if mem is None:
            continue
        relevance = calibration.relevance(cosine)
        if relevance < min_relevance:
            continue
        score = relevance * recency.factor(mem.created_at, now)
        hits.append(MemoryHit(memory=mem, relevance=relevance, score=score, similarity=cosine))
    hits.sort(key=lambda h: (-h.score, -h.memory.created_at.timestamp(), -h.memory.id))
    return hits[:limit]
