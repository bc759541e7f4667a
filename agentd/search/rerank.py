"""A decision's candidates reordered by a cross-encoder, mixed with the search's own ranking.

For a question that asks for a decision or advice for the asker ("Can I order the
prawn linguine tonight?", :func:`~agentd.search.intent.asks_of_asker`), automatic
retrieval lets the asker's own memories compete by rank, since what constrains them
shares neither a word nor a topic with the question. The bi-encoder's rank is then
all that decides, and e5-small-v2 puts "Allergic to shellfish" below three of the
user's other facts for that question a third of the time (everyday set, dev).

So the best ``pool`` candidates are read again by the cross-encoder
(:mod:`agentd.embedders.reranker`), which reads the question and each memory
together, and ordered by ``z(search) + weight x z(cross-encoder)``: each side's
scores standardised over the pool (the search's as the logit of its calibrated
relevance, the cross-encoder's as its raw logit), so neither side's scale matters
and neither alone decides. Nothing is admitted that the search's bar did not
admit: the mix only orders, and each memory keeps its relevance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentd.search.ranking import Ranked


def _standardised(values: Sequence[float]) -> list[float]:
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [0.0 if spread == 0 else (v - mean) / spread for v in values]


def _logit(relevance: float) -> float:
    p = min(max(relevance, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def mixed_order(head: Sequence[Ranked], cross: Sequence[float], weight: float) -> list[Ranked]:
    """``head`` (the search's best, best first) in the order of ``z(search) + weight x z(cross)``,
    where ``cross`` are the cross-encoder's logits for ``head``'s memories; ties keep the search's order."""
    if len(head) < 2:
        return list(head)
    search = _standardised([_logit(r.relevance) for r in head])
    reread = _standardised(list(cross))
    mixed = [s + weight * c for s, c in zip(search, reread, strict=True)]
    order = sorted(range(len(head)), key=lambda i: (-mixed[i], i))
    return [head[i] for i in order]


__all__ = ["mixed_order"]
