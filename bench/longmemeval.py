"""Retrieval quality on LongMemEval-S in its official retrieval setting, through agentd's own search.

    python bench/longmemeval.py FILE                       # hybrid (the default), dense, lexical
    python bench/longmemeval.py FILE --store postgres      # the same on PostgreSQL + pgvector
    python bench/longmemeval.py FILE --limit 20 --modes hybrid

FILE is LongMemEval data (Wu et al., "LongMemEval: Benchmarking Chat Assistants
on Long-Term Interactive Memory", ICLR 2025; github.com/xiaowu0162/LongMemEval),
e.g. ``longmemeval_s`` or a part of it: a JSON list of questions, each with
``question``, ``question_type``, ``question_date`` and a haystack of sessions
(``haystack_sessions``, ``haystack_dates``) whose turns carry ``has_answer``.
Nothing of it ships with agentd, and nothing of the dataset's ids reaches the
engine (the original evidence session ids contain the word "answer").

The setting is the authors' ``src/retrieval`` with turn-level keys over user
turns: each user turn of the haystack is one memory (``MemoryService.add_many``,
its session's date as ``created_at``, one second per turn after it), one scope
per question (``channel:lme-<n>``), and the question is asked at its
``question_date`` through ``MemoryService.search``, the function automatic
retrieval, ``recall`` and ``/context`` use, with ``min_relevance=0`` (ranking,
not the threshold) and ``limit`` ``--depth`` turns. The ranked turns are mapped
to their sessions in first-occurrence order, and the authors' ``eval_utils``
metrics are computed: ``recall_any@k`` (an evidence session among the first
k), ``recall_all@k`` (every one of them), ``ndcg_any@k`` (binary relevance),
for k = 1, 5, 10, at session level; at turn level, recall_any/recall_all over
the turns marked ``has_answer``. Evidence is what the authors' turn-level
setting uses: the user turns marked ``has_answer`` and their sessions; abstention
questions (``_abs``) and questions without such a turn are left out.

Every mode (``hybrid`` the default search, ``dense`` vectors only, ``lexical``
full text only; the one-sided modes through the measuring seam
``agentd.search.engine.with_mode``) is measured in one run, interleaved question by question so a
busy stretch of the machine does not land on one mode. Printed: the metrics
overall and per question type for each mode, search p50/p95 (query embedding
included), the ingest rate; the last three lines are ``recall_any@5``,
``recall_all@5`` and ``ndcg_any@5`` of the default search.

Stored texts' vectors are kept in ``--cache`` (default: agentd's cache
directory, ``bench-embeddings/``) so that a second run embeds only the
questions (testkit/embedcache.py); ``--cache none`` embeds everything.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


from agentd.access.scopes import Reach, Scope  # noqa: E402
from agentd.config import MemoryConfig  # noqa: E402
from agentd.embedders.local import DEFAULT_MODEL, MODELS, LocalEmbedder  # noqa: E402
from agentd.files.cache import cache_dir  # noqa: E402
from agentd.memory import MemoryService, NewMemory  # noqa: E402
from agentd.search import SearchQuery  # noqa: E402
from agentd.search.engine import with_mode  # noqa: E402
from agentd.store import Store  # noqa: E402
from testkit.embedcache import CachedEmbedder  # noqa: E402
from testkit.fusiondump import Recorder, write  # noqa: E402
from testkit.pgembedded import EmbeddedPostgres  # noqa: E402

PERSONA = "lme"
MODES = ("hybrid", "dense", "lexical")
KS = (1, 5, 10)
METRICS = ("recall_any", "recall_all", "ndcg_any")


@dataclass(frozen=True)
class Turn:
    """One user turn: its session (by position in the haystack), its text and date, evidence or not."""

    session: int
    text: str
    at: datetime
    evidence: bool


@dataclass(frozen=True)
class Question:
    """One question with its haystack; ``index`` is its position in the file (its only name here)."""

    index: int
    kind: str
    text: str
    date: datetime
    turns: tuple[Turn, ...]
    sessions: int

    @property
    def evidence_sessions(self) -> frozenset[int]:
        return frozenset(t.session for t in self.turns if t.evidence)

    @property
    def evidence_turns(self) -> frozenset[int]:
        return frozenset(i for i, t in enumerate(self.turns) if t.evidence)


def parse_date(text: str) -> datetime:
    """``"2023/05/20 (Sat) 02:21"`` as a UTC datetime."""
    day, _weekday, clock = text.split(" ", 2)
    return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def load(path: Path) -> tuple[list[Question], int]:
    """The questions of ``path`` that have evidence turns, and how many were left out."""
    data = json.loads(path.read_text(encoding="utf-8"))
    questions: list[Question] = []
    skipped = 0
    for index, item in enumerate(data):
        if str(item.get("question_id", "")).endswith("_abs"):
            skipped += 1
            continue
        turns: list[Turn] = []
        for s, (session, date) in enumerate(zip(item["haystack_sessions"], item["haystack_dates"], strict=True)):
            start = parse_date(date)
            for t in session:
                if t.get("role") == "user" and t.get("content", "").strip():
                    second = sum(1 for x in turns if x.session == s)
                    turns.append(Turn(s, t["content"], start + timedelta(seconds=second), bool(t.get("has_answer"))))
        q = Question(
            index,
            item["question_type"],
            item["question"],
            parse_date(item["question_date"]),
            tuple(turns),
            len(item["haystack_sessions"]),
        )
        if q.evidence_turns:
            questions.append(q)
        else:
            skipped += 1
    return questions, skipped


def scope_of(q: Question) -> Scope:
    return Scope.channel(f"lme-{q.index}")


def ingest(service: MemoryService, q: Question) -> dict[int, list[int]]:
    """Store one question's haystack; ``{memory_id: [turn positions]}`` (identical turns share one memory)."""
    items = [service.validate(NewMemory(PERSONA, scope_of(q), "dialogue", t.text[:8000], {}, t.at)) for t in q.turns]
    turns: dict[int, list[int]] = defaultdict(list)
    for start in range(0, len(items), 256):
        chunk = items[start : start + 256]
        for offset, (mid, _created) in enumerate(service.add_many(chunk)):
            turns[mid].append(start + offset)
    return turns


def dcg(relevances: Sequence[int], k: int) -> float:
    """eval_utils' DCG: the first gain undiscounted, then ``1 / log2(rank)`` from rank 2."""
    rel = list(relevances)[:k]
    if not rel:
        return 0.0
    return rel[0] + sum(r / math.log2(i + 1) for i, r in enumerate(rel[1:], start=1))


def evaluate(ranked: Sequence[int], correct: frozenset[int], corpus: int, k: int) -> tuple[float, float, float]:
    """eval_utils' ``evaluate_retrieval``: recall_any, recall_all, ndcg_any of ``ranked`` ids at ``k``,
    with ``corpus`` ids in all (the ideal ranking puts every correct one first)."""
    top = set(ranked[:k])
    any_ = float(any(c in top for c in correct))
    all_ = float(all(c in top for c in correct))
    ideal = dcg([1] * min(len(correct), corpus), k)
    actual = dcg([1 if r in correct else 0 for r in ranked], k)
    return any_, all_, (actual / ideal if ideal else 0.0)


def first_occurrence(items: Sequence[int]) -> list[int]:
    return list(dict.fromkeys(items))


@dataclass
class Scores:
    """Per-question values of one mode, by (question type, level, metric, k); and latencies."""

    values: dict[tuple[str, str, str, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    latency_ms: list[float] = field(default_factory=list)

    def add(self, kind: str, level: str, metric: str, k: int, value: float) -> None:
        self.values[(kind, level, metric, k)].append(value)
        self.values[("all", level, metric, k)].append(value)

    def mean(self, kind: str, level: str, metric: str, k: int) -> float:
        return statistics.fmean(self.values[(kind, level, metric, k)])


def score(q: Question, turn_ids: dict[int, list[int]], hits: Sequence[int], result: Scores) -> None:
    """Add one question's metrics for the ranked memory ids ``hits``."""
    turns = first_occurrence([t for mid in hits for t in turn_ids.get(mid, [])])
    sessions = first_occurrence([q.turns[t].session for t in turns])
    for k in KS:
        for metric, value in zip(METRICS, evaluate(sessions, q.evidence_sessions, q.sessions, k), strict=True):
            result.add(q.kind, "session", metric, k, value)
        for metric, value in zip(METRICS, evaluate(turns, q.evidence_turns, len(q.turns), k), strict=True):
            result.add(q.kind, "turn", metric, k, value)


def labels(q: Question, turn_ids: dict[int, list[int]], recorder: Recorder) -> dict[str, object]:
    """The last search's record (testkit/fusiondump.py) with what scoring it needs."""
    texts = {mid: q.turns[pos[0]].text for mid, pos in turn_ids.items()}
    record = recorder.take(q.text, texts, kind=q.kind, sessions=q.sessions)
    record["turns"] = {str(c[0]): turn_ids.get(c[0], []) for c in record["candidates"]}
    record["turn_sessions"] = [t.session for t in q.turns]
    record["evidence_turns"] = sorted(q.evidence_turns)
    return record


def percentile(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1)))] if ordered else float("nan")


def table(results: dict[str, Scores], kinds: Sequence[str], level: str) -> list[str]:
    cols = [f"{m.replace('recall_', 'r_')}@{k}" for m in METRICS for k in KS]
    lines = [f"## {level} level", f"{'mode':<8} {'type':<26} {'n':>3} " + " ".join(f"{c:>8}" for c in cols)]
    for mode, res in results.items():
        for kind in kinds:
            n = len(res.values.get((kind, level, METRICS[0], KS[0]), []))
            if n:
                vals = " ".join(f"{res.mean(kind, level, m, k):>8.3f}" for m in METRICS for k in KS)
                lines.append(f"{mode:<8} {kind:<26} {n:>3} {vals}")
    return lines


def run(
    path: Path,
    modes: Sequence[str],
    embedder: CachedEmbedder,
    url: str,
    depth: int,
    limit: int | None,
    config: MemoryConfig,
    dump: Path | None = None,
) -> str:
    """Ingest every question's haystack, ask each question in every mode; return the report.

    ``dump``: write each hybrid search's fused candidates there (testkit/fusiondump.py).
    """
    questions, skipped = load(path)
    questions = questions[:limit]
    store = Store.open(url, dimension=embedder.dimension)
    service = MemoryService(store, embedder, config, personas=[PERSONA])
    results = {m: Scores() for m in modes}
    recorder = Recorder()
    records: list[dict[str, object]] = []
    try:
        t = time.perf_counter()
        turn_ids = []
        for n, q in enumerate(questions, start=1):
            turn_ids.append(ingest(service, q))
            if n % 10 == 0:
                embedder.save()  # a long first run keeps what it embedded if stopped
        ingest_s = time.perf_counter() - t
        embedder.save()
        gc.freeze()
        for q in questions[:3]:  # warm up: page cache, lazy initialisation
            service.search(SearchQuery(q.text, Reach(PERSONA, channel=f"lme-{q.index}"), depth, min_relevance=0.0))
        # The default search for hybrid; the one-sided ones through the measuring seam.
        searchers = {m: service.searcher if m == "hybrid" else with_mode(service.searcher, m) for m in modes}  # type: ignore[arg-type]
        for n, (q, ids) in enumerate(zip(questions, turn_ids, strict=True)):
            reach = Reach(PERSONA, channel=f"lme-{q.index}")
            for mode in modes[n % len(modes) :] + modes[: n % len(modes)]:
                with recorder if dump is not None and mode == "hybrid" else ExitStack():
                    start = time.perf_counter()
                    request = SearchQuery(q.text, reach, depth, min_relevance=0.0, now=q.date)
                    hits = searchers[mode].search(request).hits
                    results[mode].latency_ms.append((time.perf_counter() - start) * 1000)
                score(q, ids, [h.memory.id for h in hits], results[mode])
                if dump is not None and mode == "hybrid":
                    records.append(labels(q, ids, recorder))
    finally:
        store.close()
    if dump is not None:
        write(dump, recorder, service.fusion, "longmemeval", depth, records)
    n_turns = sum(len(q.turns) for q in questions)
    kinds = ["all", *sorted({q.kind for q in questions})]
    out = [
        f"store: {store.backend}",
        f"file: {path}; {len(questions)} questions with evidence ({skipped} left out: abstention or no evidence turn)",
        f"embedder: {embedder.model_id} (cached passages: {embedder.hits}, embedded now: {embedder.misses})",
        f"ingest: {n_turns} turns, {n_turns / ingest_s:.0f} memories/s end-to-end (MemoryService.add_many)",
        *table(results, kinds, "session"),
        *table(results, kinds, "turn"),
        f"## search latency, query embedding included (limit {depth}, no threshold)",
    ]
    for mode, res in results.items():
        p50, p95 = percentile(res.latency_ms, 0.5), percentile(res.latency_ms, 0.95)
        out.append(f"{mode:<8} p50 {p50:.2f} ms   p95 {p95:.2f} ms")
    main = results["hybrid" if "hybrid" in results else modes[0]]
    out.append(f"## the default search ({'hybrid' if 'hybrid' in results else modes[0]}), session level")
    out.extend(f"{m}@5={main.mean('all', 'session', m, 5):.3f}" for m in METRICS)
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="a LongMemEval-format JSON file")
    parser.add_argument("--modes", default=",".join(MODES), help="search modes (hybrid, dense, lexical)")
    parser.add_argument("--store", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument(
        "--depth", type=int, default=25, help="turns asked for per question (25 keeps the default candidate pool)"
    )
    parser.add_argument("--limit", type=int, help="only the first N questions with evidence")
    parser.add_argument("--dir", type=Path, help="where the SQLite file goes (default: a temp dir)")
    parser.add_argument("--cache", default="", help="passage-vector cache directory ('none': no cache)")
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=sorted(MODELS))
    parser.add_argument(
        "--dump", type=Path, help="write each hybrid search's fused candidates here (JSON; bench/fusion_replay.py)"
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            parser.error(f"unknown mode {m!r}; use {', '.join(MODES)}")
    cache = None if args.cache == "none" else Path(args.cache) if args.cache else cache_dir() / "bench-embeddings"
    embedder = CachedEmbedder(LocalEmbedder(args.model), cache)
    with ExitStack() as stack:
        if args.store == "postgres":
            url = stack.enter_context(EmbeddedPostgres()).create_database("longmemeval")
        else:
            workdir = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentd-lme-")))
            (workdir / "lme.db").unlink(missing_ok=True)
            url = f"sqlite:///{workdir / 'lme.db'}"
        print(run(args.file, modes, embedder, url, args.depth, args.limit, MemoryConfig(), args.dump), flush=True)


if __name__ == "__main__":
    main()
