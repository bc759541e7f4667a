"""Relevance: the calibrated score in [0, 1] that agentd shows and filters on.

Raw cosine similarities are not comparable across embedding models, and for
all-MiniLM-L6-v2 a clearly related pair ("User likes Python" / "What programming
language should I learn?") scores only 0.36 while unrelated pairs sit at
0.0-0.1. Each embedder therefore carries a :class:`Calibration`, a logistic map
from cosine to relevance whose midpoint is the cosine that reads as 0.5, the
default threshold. Recency then scales the relevance into the ranking score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Calibration:
    """relevance = 1 / (1 + exp(-(cosine - midpoint) / scale))."""

    midpoint: float
    scale: float

    def relevance(self, cosine: float) -> float:
        """The calibrated relevance of one cosine similarity."""
        return sigmoid(self.logit(cosine))

    def logit(self, cosine: float) -> float:
        """The log-odds of relevance of one cosine similarity (what :meth:`relevance` maps to [0, 1])."""
        return (cosine - self.midpoint) / self.scale


def sigmoid(z: float) -> float:
    """1 / (1 + exp(-z)), 0 far below zero."""
    if z < -60:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))


#: Identity-like default for models nobody calibrated: relevance 0.5 at cosine 0.5.
UNCALIBRATED = Calibration(midpoint=0.5, scale=0.1)


@dataclass(frozen=True)
class WordWeights:
    """How much full-text evidence counts in hybrid search, in one model's cosine units.

    Hybrid search adds word and date evidence to the cosine (agentd/memory/fusion.py),
    so how much it may add depends on how spread out the model's cosines are: each
    embedder carries the weights measured for it, and ``[memory.tuning]`` settings override them.
    """

    #: The most the best word match of a query adds to a cosine.
    lexical_weight: float
    #: bm25 (full-text score) below which the word boost fades.
    lexical_saturation: float
    #: Added for a memory created on a calendar day the query names.
    date_weight: float
    #: ``lexical_weight`` for a query that names nothing (agentd/memory/fusion.py); ``None``: the same.
    plain_weight: float | None = None
    #: ``lexical_saturation`` for a query that names nothing; ``None``: the same.
    plain_saturation: float | None = None


#: Weights for models nobody measured (measured for all-MiniLM-L6-v2, whose cosines
#: spread like most general-purpose embedders').
DEFAULT_WORDS = WordWeights(lexical_weight=1.5, lexical_saturation=10.0, date_weight=0.5)


@dataclass(frozen=True)
class Recency:
    """factor = 1 - weight + weight * 0.5 ** (age_days / half_life_days); age scales the odds.

    A hit's score is its relevance with its *odds* scaled by the factor
    (:meth:`decayed`): ``odds(score) = odds(relevance) * factor``. For a weak or
    middling match that is about ``relevance * factor``; a strong match keeps
    nearly all of it, so among memories that all match strongly (relevance near
    1, where the calibration saturates) age no longer decides the order, their
    evidence does. Scaling the relevance itself made a fresh, weaker match
    outrank an older, stronger one whenever both saturated (LongMemEval,
    docs/notes/recall-tuning.md). ``weight`` bounds what age can take away
    (0.2: a year-old memory keeps at least 80% of its relevance), so an old fact
    that matches well still outranks a fresh one that matches poorly.
    """

    half_life_days: float
    weight: float

    def factor(self, created_at: datetime, now: datetime) -> float:
        """The multiplier for a memory created at ``created_at``."""
        age_days = max(0.0, (now - created_at).total_seconds() / SECONDS_PER_DAY)
        return float(1.0 - self.weight + self.weight * 0.5 ** (age_days / self.half_life_days))

    def decayed(self, logit: float, created_at: datetime, now: datetime) -> float:
        """The score of a hit whose relevance has log-odds ``logit`` (at least ``factor * relevance``)."""
        factor = self.factor(created_at, now)
        return sigmoid(logit + math.log(factor)) if factor > 0 else 0.0
