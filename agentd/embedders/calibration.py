"""Calibration: what an embedder carries so that its cosines read as relevance in [0, 1].

Raw cosine similarities are not comparable across embedding models, and for
all-MiniLM-L6-v2 a clearly related pair ("User likes Python" / "What programming
language should I learn?") scores only 0.36 while unrelated pairs sit at
0.0-0.1. Each embedder therefore carries a :class:`Calibration`, a logistic map
from cosine to relevance whose midpoint is the cosine that reads as 0.5, the
default threshold. Search (agentd/search/) then scales the relevance by recency into
the ranking score. These are plain values of each embedder (and of ``[memory]``
overrides), so they sit beside the embedders, below search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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

    Hybrid search adds word and date evidence to the cosine (agentd/search/fusion.py),
    so how much it may add depends on how spread out the model's cosines are: each
    embedder carries the weights measured for it, and ``[memory.tuning]`` settings override them.
    """

    #: The most the best word match of a query adds to a cosine.
    lexical_weight: float
    #: bm25 (full-text score) below which the word boost fades.
    lexical_saturation: float
    #: Added for a memory created on a calendar day the query names.
    date_weight: float
    #: ``lexical_weight`` for a query that names nothing (agentd/search/fusion.py); ``None``: the same.
    plain_weight: float | None = None
    #: ``lexical_saturation`` for a query that names nothing; ``None``: the same.
    plain_saturation: float | None = None


#: Weights for models nobody measured (measured for all-MiniLM-L6-v2, whose cosines
#: spread like most general-purpose embedders').
DEFAULT_WORDS = WordWeights(lexical_weight=1.5, lexical_saturation=10.0, date_weight=0.5)
