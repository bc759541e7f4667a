"""Hybrid fusion: vector and full-text candidates merged into one evidence value.

Each candidate memory has a cosine similarity (from the vector side) and a
bm25 score (from the full-text side, 0 when no query term matched). Fusion
turns them into one *effective cosine*::

    effective = cosine + lexical_weight * bm25 / (best_bm25 + lexical_saturation)

``best_bm25`` is the best lexical score of this query, so the best lexical
match earns at most ``lexical_weight`` (in cosine units) and the others earn in
proportion to their bm25. ``lexical_saturation`` (in bm25 units) shrinks the
whole lexical boost when even the best match is weak: when only words that
are everywhere matched (low idf), bm25 is small and so is the boost.

The effective cosine then goes through the embedder's calibration, the same
logistic map dense search always used, so relevance stays "as likely relevant
as not" at 0.5: a memory that shares no word with the query is scored exactly
as before, and lexical evidence can only raise it (README, "Retrieval").
A query that names a calendar day ("on 16 June, 2023") adds ``date_weight``
to every candidate created that day (agentd/memory/dates.py).

The weights are in cosine units, so they belong to the embedding model (how
spread out its cosines are): each embedder carries its own
(:class:`agentd.relevance.WordWeights`), and ``[memory]`` settings override
them. They were chosen on dev data only (LoCoMo conversations 0-2 with
bench/locomo.py, LongMemEval-S dev with bench/longmemeval.py); held-out parts
were only measured, never used to choose:

- e5-small-v2 (the default): ``lexical_weight = 0.2``, ``lexical_saturation
  = 20``, ``date_weight = 0.25 / 3``. Rule, on dev data only: among the weights
  whose LoCoMo dev (R@5 + R@10) / 2 is within 0.005 of the best (0.25: 0.772;
  0.2: 0.770; 0.125: 0.767, out), the one with the best LongMemEval-S dev
  ndcg_any@5 (0.2: 0.939, above dense alone's 0.936; 0.25: 0.927, below it).
  The date weight is as first chosen (a third of 0.25). docs/notes/recall-tuning.md.
- all-MiniLM-L6-v2: ``lexical_weight = 1.5``, ``lexical_saturation = 10``,
  ``date_weight = 0.5`` (grid over lexical_weight 0.5-2.5, saturation 3-25,
  date_weight 0-1).

Both with :data:`agentd.store.lexical.CONTEXT_WEIGHT` 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentd.relevance import DEFAULT_WORDS

if TYPE_CHECKING:
    from agentd.config import MemoryConfig
    from agentd.relevance import WordWeights


@dataclass(frozen=True)
class Evidence:
    """What the two searches know about one candidate memory."""

    cosine: float
    bm25: float = 0.0
    #: False when the memory was not among the vector candidates; ``cosine`` is
    #: then the pool's lowest (an upper bound for it).
    dense_known: bool = True


@dataclass(frozen=True)
class Fusion:
    """How much lexical evidence counts (see the module docstring)."""

    lexical_weight: float = DEFAULT_WORDS.lexical_weight
    lexical_saturation: float = DEFAULT_WORDS.lexical_saturation
    #: Added to a candidate created on a day the query names (agentd/memory/dates.py).
    date_weight: float = DEFAULT_WORDS.date_weight

    @classmethod
    def of(cls, words: WordWeights, config: MemoryConfig) -> Fusion:
        """The embedder's weights, with what ``[memory]`` sets explicitly instead."""

        def pick(configured: float | None, own: float) -> float:
            return own if configured is None else configured

        return cls(
            pick(config.lexical_weight, words.lexical_weight),
            pick(config.lexical_saturation, words.lexical_saturation),
            pick(config.date_weight, words.date_weight),
        )

    def merge(self, dense: Sequence[tuple[int, float]], lexical: Sequence[tuple[int, float]]) -> dict[int, Evidence]:
        """``{memory_id: Evidence}`` for every candidate of either side.

        ``dense`` is ``(id, cosine)`` best first, ``lexical`` ``(id, bm25)``.
        A lexical-only candidate was not among the nearest vectors, so its
        cosine is at most the pool's lowest; that bound stands in for it.
        """
        floor = min((c for _, c in dense), default=0.0)
        found = {mid: Evidence(cosine) for mid, cosine in dense}
        for mid, score in lexical:
            seen = found.get(mid)
            found[mid] = Evidence(seen.cosine, score) if seen is not None else Evidence(floor, score, dense_known=False)
        return found

    def effective_cosine(self, evidence: Evidence, best_bm25: float, on_named_day: bool = False) -> float:
        """The cosine that the calibration turns into relevance.

        ``on_named_day``: the memory was created on a calendar day the query names.
        """
        effective = evidence.cosine
        if evidence.bm25 > 0.0:
            effective += self.lexical_weight * evidence.bm25 / (best_bm25 + self.lexical_saturation)
        if on_named_day:
            effective += self.date_weight
        return effective


def best_bm25(candidates: dict[int, Evidence]) -> float:
    """The best lexical score among ``candidates`` (0 when none matched)."""
    return max((e.bm25 for e in candidates.values()), default=0.0)
