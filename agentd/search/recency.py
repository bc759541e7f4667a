"""Recency: how a memory's age scales its relevance into the ranking score."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from agentd.embedders.calibration import sigmoid

SECONDS_PER_DAY = 86_400.0


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
