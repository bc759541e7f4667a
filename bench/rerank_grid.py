"""How a decision's own candidates should be reordered: the cross-encoder's pool and weight, on the everyday set.

    python bench/rerank_grid.py            # ~1 min: e5 and the cross-encoder over every (question, fact) pair

For every question of the everyday set (tests/data/everyday_set.json, testkit/everyday.py) and
every writing style, the asker's facts are ranked as automatic retrieval ranks a decision's own
candidates (agentd/search/rerank.py): the best ``pool`` by the e5-small-v2 cosine of the
question and the fact's indexed text, reordered by ``z(search) + weight x z(cross-encoder)``
(:func:`agentd.search.rerank.mixed_order`, on the calibrated relevance of that cosine; the
cross-encoder reads the text :func:`agentd.search.subjects.reread_text` gives), then the rest.
It prints the share of questions whose fact is in the first three (``[memory] max_per_reply``), per kind
(direct, one-step) and part (dev, held-out), for each pool and weight; ``dense`` is the search's
order alone. The pool and weight were chosen on the dev columns only (docs/notes/recall-tuning.md,
"Sixth pass").

    python bench/rerank_grid.py --about    # could the cross-encoder admit, not only order?

``--about`` measures, for the questions about the asker (``asks_of_asker`` = "about", which keep
``personal_min_score`` 0.4), a second way in that was measured and not kept: below the bar, the
asker's memory that the cross-encoder (or the mix) ranks first among the pool is admitted when its
relevance is at least a lower floor. Per floor: the questions it would recover (their fact below
0.4 and admitted) and the wrong memories it would add, dev and held-out.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from everyday_signals import Pairs  # noqa: E402

from agentd.access.scopes import Scope  # noqa: E402
from agentd.embedders.calibration import sigmoid  # noqa: E402
from agentd.embedders.local import LocalEmbedder  # noqa: E402
from agentd.embedders.reranker import CrossEncoder  # noqa: E402
from agentd.search.intent import asks_of_asker  # noqa: E402
from agentd.search.ranking import Ranked  # noqa: E402
from agentd.search.rerank import mixed_order  # noqa: E402
from agentd.search.subjects import reread_text  # noqa: E402
from testkit.everyday import load_everyday  # noqa: E402

POOLS = (6, 8, 10, 12)
WEIGHTS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
TOP_K = 3


def main() -> None:
    labelled = load_everyday()
    embedder = LocalEmbedder("e5-small-v2")
    encoder = CrossEncoder()
    pairs = Pairs(labelled, embedder)
    calibration = embedder.calibration
    # (kind, held, facts ranked by cosine as Ranked, the fact's id, cross-encoder logit by fact id)
    cases = []
    q = 0
    for fi, fact in enumerate(labelled.facts):
        facts = pairs.users_facts(fact.user["id"])
        for question in fact.questions:
            for s, style in enumerate(labelled.styles):
                cos = {i: float(pairs.facts[i, s] @ pairs.questions[q]) for i in facts}
                ranked = [
                    Ranked(i, sigmoid(calibration.logit(cos[i])), 0.0, cos[i], 0.0)
                    for i in sorted(facts, key=lambda i: -cos[i])
                ]
                read = [reread_text(labelled.facts[i].text(style), Scope.user(fact.user["id"])) for i in facts]
                cross = dict(zip(facts, (float(x) for x in encoder.score(question, read)), strict=True))
                cases.append((fact.kind, fact.held, ranked, fi, cross, asks_of_asker(question)))
            q += 1

    def share(pool: int | None, weight: float) -> str:
        cells = []
        for kind in ("direct", "one_step"):
            for held in (False, True):
                chosen = [c for c in cases if c[0] == kind and c[1] == held]
                hit = 0
                for _kind, _held, ranked, fi, cross, _asks in chosen:
                    order = ranked
                    if pool is not None:
                        head = ranked[:pool]
                        order = mixed_order(head, [cross[r.id] for r in head], weight) + ranked[pool:]
                    hit += fi in [r.id for r in order[:TOP_K]]
                cells.append(f"{hit / len(chosen):.3f}")
        return " ".join(f"{c:>9}" for c in cells)

    if "--about" in sys.argv[1:]:
        about(cases)
        return
    print(f"{'pool':>5} {'weight':>6} {'dir dev':>9} {'dir held':>9} {'1-st dev':>9} {'1-st held':>9}")
    print(f"{'dense':>5} {'':>6} {share(None, 0.0)}")
    for pool in POOLS:
        for weight in WEIGHTS:
            print(f"{pool:>5} {weight:>6} {share(pool, weight)}")


def about(cases: list[tuple[Any, ...]]) -> None:
    """The ``--about`` table (see the module docstring), pool 8, weight 2."""
    pool, weight, bar = 8, 2.0, 0.4
    print(f"{'floor':>6} {'by':>4} {'dev recovered':>14} {'dev wrong':>10} {'held recovered':>15} {'held wrong':>11}")
    for floor in (0.05, 0.1, 0.2, 0.3):
        for by in ("ce", "mix"):
            cells = []
            for held in (False, True):
                recovered = wrong = 0
                for kind, part, ranked, fi, cross, asks in cases:
                    if kind != "direct" or part != held or asks != "about":
                        continue
                    head = ranked[:pool]
                    first = (
                        max(head, key=lambda r: cross[r.id])
                        if by == "ce"
                        else mixed_order(head, [cross[r.id] for r in head], weight)[0]
                    )
                    answer = next(r for r in ranked if r.id == fi)
                    if floor <= first.relevance < bar:
                        if first.id == fi and answer.relevance < bar:
                            recovered += 1
                        elif first.id != fi:
                            wrong += 1
                cells += [recovered, wrong]
            print(f"{floor:>6} {by:>4} {cells[0]:>14} {cells[1]:>10} {cells[2]:>15} {cells[3]:>11}")


if __name__ == "__main__":
    main()
