"""Ranking: from fused candidates to calibrated, time-decayed hits.

This is the ranking behind the one search (:class:`agentd.search.engine.Searcher`)
that ``recall``, automatic retrieval, the memory service's ``/search`` and
``/context``, and ``agentd memory search`` all use.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from agentd.access.scopes import Scope
from agentd.embedders.calibration import Calibration, sigmoid
from agentd.search.fusion import Evidence, Fusion, best_bm25
from agentd.search.recency import Recency
from agentd.store.memories import Memory

#: The relevance of a memory recalled because of what the query asks rather than its words:
#: the user's own memories for "what do you know about me?", their preferences for "what
#: should I learn?" (agentd/search/intent.py). All of them answer the question, so they are
#: given one value, above the default threshold (0.5: as likely relevant as not) and below
#: what a strong topical match reaches; age orders them (newest first).
INTENT_RELEVANCE = 0.75


def seed_timestamp(moment: datetime) -> str:
    """The recall skill's ``created_at``: UTC, whole seconds, ``Z`` (``2025-01-15T10:30:00Z``)."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class MemoryHit:
    """One memory found by a search.

    ``relevance`` is the calibrated match quality in [0, 1] (what thresholds
    apply to); ``score`` is relevance scaled by recency (what ranks).
    ``similarity`` is the raw cosine (``None`` when the memory was found by its
    words only) and ``bm25`` the full-text score (0: no query word matched).
    """

    memory: Memory
    relevance: float
    score: float
    similarity: float | None = None
    bm25: float = 0.0

    def as_result(self) -> dict[str, Any]:
        """The recall skill's result item (text, category, score, created_at),
        plus id, scope, relevance and metadata."""
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

    def as_recall_result(self) -> dict[str, Any]:
        """Exactly the recall skill's result item: ``{text, category, score, created_at}``."""
        return {
            "text": self.memory.text,
            "category": self.memory.category,
            "score": round(self.score, 4),
            "created_at": seed_timestamp(self.memory.created_at),
        }


@dataclass(frozen=True)
class Bar:
    """The relevance a search result needs: ``general`` for most memories, ``own`` for the asker's
    own memories (user scope); ``own = None``: none of theirs is a result (the question is not
    about them; agentd/search/intent.py, :func:`~agentd.search.intent.asks_of_asker`)."""

    general: float
    own: float | None

    @classmethod
    def single(cls, threshold: float) -> Bar:
        """One threshold for every memory."""
        return cls(threshold, threshold)

    @property
    def lowest(self) -> float:
        """The least relevance any result may have."""
        return self.general if self.own is None else min(self.general, self.own)

    @property
    def highest(self) -> float:
        """The least relevance that makes any memory a result (the most a near miss may have)."""
        return max(self.general, self.own if self.own is not None else 0.0)

    def admits(self, scope: Scope, relevance: float) -> bool:
        """Whether a memory of ``scope`` with ``relevance`` is a result."""
        if scope.kind != "user":
            return relevance >= self.general
        return self.own is not None and relevance >= self.own

    def shows_near(self, scope: Scope, relevance: float, floor: float) -> bool:
        """Whether it is a near miss: not a result, at least ``floor``, and not passed over
        because the question is not about the asker."""
        if relevance < floor or self.admits(scope, relevance):
            return False
        return scope.kind != "user" or self.own is not None


@dataclass(frozen=True)
class Ranked:
    """A candidate's place in the ranking, before its row is loaded."""

    id: int
    relevance: float
    score: float
    similarity: float | None
    bm25: float

    def hit(self, memory: Memory) -> MemoryHit:
        """The hit for this candidate's loaded ``memory``."""
        return MemoryHit(memory, self.relevance, self.score, self.similarity, self.bm25)


@dataclass(frozen=True)
class Ranker:
    """How fused candidates become ranked hits: the embedder's ``calibration`` (cosine to
    relevance), ``recency`` (age scales the odds) and the ``fusion`` weights (words and dates
    added to the cosine)."""

    calibration: Calibration
    recency: Recency
    fusion: Fusion = field(default_factory=Fusion)

    def rank(
        self,
        candidates: dict[int, Evidence],
        created: Mapping[int, datetime],
        now: datetime,
        *,
        min_relevance: float,
        limit: int | None = None,
        days: Collection[date] = (),
    ) -> list[Ranked]:
        """The best ``limit`` (``None``: all) fused candidates at or above ``min_relevance``, best first.

        Only ids and creation times are needed (``created``: a candidate missing there
        was deleted and is skipped), so the caller loads whole rows for the winners
        alone. relevance = calibration(fusion's effective cosine); score = relevance with
        its odds scaled by recency (:meth:`agentd.search.recency.Recency.decayed`).
        ``days``: calendar days the query names (a memory created on one
        gets the fusion's date boost). Ties break on the effective cosine (strong word
        matches can push the calibrated relevance to exactly 1.0 in floating point),
        then on newer memory, then on id, so results are deterministic.
        """
        fusion, calibration, recency = self.fusion, self.calibration, self.recency
        best = best_bm25(candidates)
        ranked: list[tuple[tuple[float, float, float, int], Ranked]] = []
        for mid, evidence in candidates.items():
            when = created.get(mid)
            if when is None:
                continue
            on_day = bool(days) and _utc_day(when) in days
            effective = fusion.effective_cosine(evidence, best, on_day)
            logit = calibration.logit(effective)
            relevance = sigmoid(logit)
            if relevance < min_relevance:
                continue
            score = recency.decayed(logit, when, now)
            similarity = evidence.cosine if evidence.dense_known else None
            key = (-score, -effective, -when.timestamp(), -mid)
            ranked.append((key, Ranked(mid, relevance, score, similarity, evidence.bm25)))
        ranked.sort(key=lambda pair: pair[0])
        return [r for _, r in (ranked if limit is None else ranked[:limit])]


def _utc_day(moment: datetime) -> date:
    return (moment.astimezone(UTC) if moment.tzinfo else moment).date()
