"""Re-rank the candidates that bench/longmemeval.py or bench/locomo.py dumped, under other fusion weights.

    python bench/longmemeval.py FILE --dump lme.json
    python bench/locomo.py FILE --dev 0,1,2 --k 1,5,10 --rounds 0 --modes hybrid --dump locomo.json
    python bench/fusion_replay.py lme.json                     # the default search, as the bench ran it
    python bench/fusion_replay.py lme.json --weight 0.2 --saturation 20 --one-weight   # the old default
    python bench/fusion_replay.py lme.json --plain-weight 0.1 --plain-saturation 20
    python bench/fusion_replay.py locomo.json --dev 0,1,2      # held-out only with --held-out

Each question's record holds exactly what the search's ranking was given (testkit/fusiondump.py),
so the replay runs agentd's own :func:`agentd.search.ranking.rank` over it with a
:class:`~agentd.search.fusion.Fusion` of the given weights (default: the dump's), chosen per
query as the search chooses them (:meth:`~agentd.search.fusion.Fusion.for_query`), skips the
results without a content word as the search does, and prints the bench's own metrics: for
LongMemEval-S, session-level recall_any, recall_all and ndcg_any at 1, 5, 10 for hybrid and,
from the same candidates, dense and lexical alone; for LoCoMo, R@1, R@5, R@10 of the dev
conversations (held-out only when asked). With the dump's own weights it reproduces the
bench's hybrid figures exactly. ``--one-weight`` gives every query the weights of a query
that names something (what the search did before the weight depended on the query).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import longmemeval as lme  # noqa: E402

from agentd.embedders.calibration import Calibration  # noqa: E402
from agentd.search.fusion import Evidence, Fusion  # noqa: E402
from agentd.search.ranking import Ranker  # noqa: E402
from agentd.search.recency import Recency  # noqa: E402

Rule = Callable[[str, dict[int, Evidence], Fusion], Fusion]


def per_query(query: str, _candidates: dict[int, Evidence], fusion: Fusion) -> Fusion:
    """What the search does: the weights for a query that names something, or the plain ones."""
    return fusion.for_query(query)


def one_weight(_query: str, _candidates: dict[int, Evidence], fusion: Fusion) -> Fusion:
    """One weight for every query (the search before the weight depended on the query)."""
    return fusion


def ranked_ids(record: dict[str, Any], dump: dict[str, Any], fusion: Fusion, mode: str, rule: Rule) -> list[int]:
    """The ids the search would return for ``record`` in ``mode`` under ``fusion``."""
    candidates: dict[int, Evidence] = {}
    created: dict[int, datetime] = {}
    for mid, cosine, bm25, known, when in record["candidates"]:
        if mode == "dense" and not known:
            continue
        if mode == "lexical" and bm25 <= 0:
            continue
        if mode == "dense":
            bm25 = 0.0
        if mode == "lexical":
            cosine, known = 0.0, False
        candidates[mid] = Evidence(cosine, bm25, known)
        created[mid] = datetime.fromisoformat(when)
    if mode == "hybrid":
        fusion = rule(record["query"], candidates, fusion)
    days = {date.fromisoformat(d) for d in record["days"]} if mode == "hybrid" else set()
    calibration = Calibration(*dump["calibration"])
    recency = Recency(*dump["recency"])
    now = datetime.fromisoformat(record["now"])
    ranked = Ranker(calibration, recency, fusion).rank(candidates, created, now, min_relevance=0.0, days=days)
    skip = set(record["no_content"])
    return [r.id for r in ranked if r.id not in skip][: dump["limit"]]


def longmemeval(dump: dict[str, Any], fusion: Fusion, modes: Sequence[str], rule: Rule) -> dict[str, lme.Scores]:
    """Session-level LongMemEval metrics per mode."""
    results = {m: lme.Scores() for m in modes}
    for i, record in enumerate(dump["questions"]):
        evidence = set(record["evidence_turns"])
        turns = tuple(lme.Turn(s, "", datetime.min, n in evidence) for n, s in enumerate(record["turn_sessions"]))
        q = lme.Question(i, record["kind"], record["query"], datetime.min, turns, record["sessions"])
        ids = {int(mid): pos for mid, pos in record["turns"].items()}
        for mode in modes:
            lme.score(q, ids, ranked_ids(record, dump, fusion, mode, rule), results[mode])
    return results


def lme_row(res: lme.Scores) -> dict[str, float]:
    return {f"{m}@{k}": res.mean("all", "session", m, k) for m in lme.METRICS for k in lme.KS}


def locomo(dump: dict[str, Any], fusion: Fusion, dev: set[int], held_out: bool, rule: Rule) -> dict[str, float]:
    """LoCoMo R@1, R@5, R@10 of the dev conversations (or the held-out ones)."""
    values: dict[int, list[float]] = {1: [], 5: [], 10: []}
    for record in dump["questions"]:
        if (record["conversation"] in dev) == held_out:
            continue
        ranked = ranked_ids(record, dump, fusion, "hybrid", rule)
        for k in values:
            found = {d for mid in ranked[:k] for d in record["dia"].get(str(mid), [])}
            values[k].append(sum(1 for e in record["evidence"] if e in found) / len(record["evidence"]))
    return {f"R@{k}": statistics.fmean(v) for k, v in values.items()} | {"n": len(values[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump", type=Path, help="a file written by a bench's --dump")
    parser.add_argument("--weight", type=float, help="lexical_weight (a query that names something)")
    parser.add_argument("--saturation", type=float, help="lexical_saturation (a query that names something)")
    parser.add_argument("--plain-weight", type=float, help="plain_weight (a query that names nothing)")
    parser.add_argument("--plain-saturation", type=float, help="plain_saturation (a query that names nothing)")
    parser.add_argument("--one-weight", action="store_true", help="every query gets --weight and --saturation")
    parser.add_argument("--dev", default="0,1,2", help="LoCoMo: the dev conversations")
    parser.add_argument("--held-out", action="store_true", help="LoCoMo: the held-out conversations instead")
    args = parser.parse_args()
    dump = json.loads(args.dump.read_text(encoding="utf-8"))
    fusion = Fusion(**dump["fusion"])
    changes = {
        "lexical_weight": args.weight,
        "lexical_saturation": args.saturation,
        "plain_weight": args.plain_weight,
        "plain_saturation": args.plain_saturation,
    }
    fusion = replace(fusion, **{k: v for k, v in changes.items() if v is not None})
    rule = one_weight if args.one_weight else per_query
    one = f"one weight for every query: {fusion.lexical_weight} / {fusion.lexical_saturation}"
    print(fusion if rule is per_query else one)
    if dump["bench"] == "longmemeval":
        for mode, res in longmemeval(dump, fusion, ("hybrid", "dense", "lexical"), rule).items():
            print(f"{mode:<8} " + " ".join(f"{k}={v:.3f}" for k, v in lme_row(res).items()))
    else:
        dev = {int(i) for i in args.dev.split(",")}
        row = locomo(dump, fusion, dev, args.held_out, rule)
        part = "held-out" if args.held_out else "dev"
        print(f"hybrid {part} " + " ".join(f"{k}={v:.3f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
