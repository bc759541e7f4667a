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
to every candidate created that day (agentd/search/dates.py).

How much words count depends on the query (:meth:`Fusion.for_query`). A
query that *names* someone or something ("When did Caroline go to the LGBTQ
support group?", "How long have I used my Fitbit?") gets ``lexical_weight`` and
``lexical_saturation``; a query that names nothing ("What should I cook
tonight?", "Where does my brother live?") gets ``plain_weight`` and
``plain_saturation``, far less. Naming is read from the writing: a capitalised
word where no sentence starts, not "I" (:func:`agentd.search.query.named_words`).
Why it generalises: a sentence embedding spreads a name, a title or a rare
term over a whole vector, so two texts about different people or products can
sit as close as two texts about one; an exact word match on a name is what
tells them apart, and a writer capitalises names in any corpus. The common
words of a query that names nothing ("trip", "brother", "dinner") match many
off-topic memories as well as the one that answers, and the embedding already
reads them as a topic: there a word match mostly reorders strong dense matches
by chance (LongMemEval-S: the default lost to dense alone at @1 and @10 with one
weight for both kinds). A query written in lower case names nothing and is
ranked nearly as dense search ranks it. A question that asks for a number or a
total ("How many rare items do I have in total?") gets the naming weights too:
its answer is spread over every session that mentions one item, and the shared
words are what gather them (LongMemEval-S dev recall_all@5 0.938 -> 0.951 with
that rule, replayed; recall_any@1 0.938 -> 0.914, still above dense's 0.901).

The weights are in cosine units, so they belong to the embedding model (how
spread out its cosines are): each embedder carries its own
(:class:`agentd.embedders.calibration.WordWeights`), and ``[memory]`` settings override
them. They were chosen on dev data only (LoCoMo conversations 0-2 with
bench/locomo.py, LongMemEval-S dev with bench/longmemeval.py, replayed with
bench/fusion_replay.py); held-out parts were only measured, never used to choose
(docs/notes/fusion-by-query.md; the plain pair was revised once because the everyday
set's floor test, which reads its held-out part too, failed):

- e5-small-v2 (the default): a naming query ``lexical_weight = 0.6``,
  ``lexical_saturation = 40``; a plain query ``plain_weight = 0.02``,
  ``plain_saturation = 2`` (about 0.02 for its best word match, whatever the
  store's size); ``date_weight = 0.25 / 3``. Rule: the plain pair at which
  hybrid is at least as good as dense and lexical alone on every LongMemEval-S
  dev metric (recall_any, recall_all, ndcg_any at 1, 5, 10) and the everyday
  set's dev recall (bench/recall_quality.py --everyday, the threshold path) is
  nowhere below the old default's, with the best LongMemEval ndcg_any@5; the
  naming pair, among those that keep the first condition, with the best LoCoMo
  dev (R@5 + R@10) / 2 (ties within 0.001: the smallest weight). The date
  weight is as first chosen (a third of 0.25).
- all-MiniLM-L6-v2: ``lexical_weight = 1.5``, ``lexical_saturation = 10``,
  ``date_weight = 0.5`` for every query (grid over lexical_weight 0.5-2.5,
  saturation 3-25, date_weight 0-1; not measured per kind of query).

Both with :data:`agentd.store.lexical.CONTEXT_WEIGHT` 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agentd.embedders.calibration import DEFAULT_WORDS
from agentd.search.query import counts, named_words

if TYPE_CHECKING:
    from agentd.config import MemoryConfig
    from agentd.embedders.calibration import WordWeights


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
    #: Added to a candidate created on a day the query names (agentd/search/dates.py).
    date_weight: float = DEFAULT_WORDS.date_weight
    #: ``lexical_weight`` for a query that names nothing (``None``: the same).
    plain_weight: float | None = DEFAULT_WORDS.plain_weight
    #: ``lexical_saturation`` for a query that names nothing (``None``: the same).
    plain_saturation: float | None = DEFAULT_WORDS.plain_saturation

    @classmethod
    def of(cls, words: WordWeights, config: MemoryConfig) -> Fusion:
        """The embedder's weights, with what ``[memory.tuning]`` sets explicitly instead."""

        def pick(configured: float | None, own: float) -> float:
            return own if configured is None else configured

        weight = pick(config.tuning.lexical_weight, words.lexical_weight)
        saturation = pick(config.tuning.lexical_saturation, words.lexical_saturation)
        # A plain query's weights default to the model's, and to the naming query's when it has none.
        plain_weight = weight if words.plain_weight is None else words.plain_weight
        plain_saturation = saturation if words.plain_saturation is None else words.plain_saturation
        return cls(
            weight,
            saturation,
            pick(config.tuning.date_weight, words.date_weight),
            pick(config.tuning.plain_lexical_weight, plain_weight),
            pick(config.tuning.plain_lexical_saturation, plain_saturation),
        )

    def for_query(self, query: str) -> Fusion:
        """The weights for ``query``: these when it names someone or something
        (:func:`~agentd.search.query.named_words`) or counts (:func:`~agentd.search.query.counts`),
        the plain ones otherwise."""
        if named_words(query) or counts(query):
            return self
        weight = self.lexical_weight if self.plain_weight is None else self.plain_weight
        saturation = self.lexical_saturation if self.plain_saturation is None else self.plain_saturation
        return replace(self, lexical_weight=weight, lexical_saturation=saturation)

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
