"""Precision and recall of automatic retrieval on a labelled conversational set, per query type and
embedder: the evaluation bench/recall_quality.py prints (its docstring says how) and
tests/test_recall_quality.py holds to floors."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentd.access.scopes import Reach, Scope
from agentd.config import HistoryConfig, MemoryConfig
from agentd.embedders import Embedder
from agentd.embedders.local import MODELS, LocalEmbedder
from agentd.memory import MemoryService
from agentd.recall.earlier import EarlierExchanges, seeded_query
from agentd.search import SearchQuery
from agentd.search.intent import Asker
from agentd.store import Store
from agentd.store.schema import utcnow
from testkit.everyday import DEFAULT_EVERYDAY, evaluate_everyday, everyday_report, load_everyday

DEFAULT_SET = Path(__file__).resolve().parent.parent / "tests" / "data" / "recall_set.json"
TYPES = ("about_user", "personal", "topical", "chitchat", "follow_up")


@dataclass(frozen=True)
class Query:
    """One labelled query."""

    type: str
    user: str
    channel: str
    text: str
    recall: frozenset[str]
    maybe: frozenset[str]
    history: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelledSet:
    """Memories (by key) and labelled queries."""

    persona: str
    memories: tuple[dict[str, Any], ...]
    queries: tuple[Query, ...]


def load_set(path: Path) -> LabelledSet:
    """Read a set file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    queries = tuple(
        Query(
            type=q["type"],
            user=q["user"],
            channel=q.get("channel", "general"),
            text=q["query"],
            recall=frozenset(q["recall"]),
            maybe=frozenset(q.get("maybe", ())),
            history=tuple(q.get("history", ())),
        )
        for q in data["queries"]
    )
    return LabelledSet(data["persona"], tuple(data["memories"]), queries)


@dataclass(frozen=True)
class Outcome:
    """What one query recalled, scored against its labels."""

    query: Query
    recalled: tuple[str, ...]
    reachable: frozenset[str]
    limit: int

    @property
    def hits(self) -> int:
        return sum(1 for k in self.recalled if k in self.query.recall)

    @property
    def wrong(self) -> tuple[str, ...]:
        return tuple(k for k in self.recalled if k not in self.query.recall and k not in self.query.maybe)

    @property
    def expected(self) -> int:
        return min(len(self.query.recall & self.reachable), self.limit)


@dataclass
class Scores:
    """Sums over a group of outcomes."""

    queries: int = 0
    hits: int = 0
    wrong: int = 0
    expected: int = 0
    empty_queries: int = 0
    empty_violated: int = 0
    failures: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.queries += 1
        self.hits += o.hits
        self.wrong += len(o.wrong)
        self.expected += o.expected
        if not o.query.recall:
            self.empty_queries += 1
            self.empty_violated += bool(o.recalled)
        if o.wrong or o.hits < o.expected:
            self.failures.append(o)

    @property
    def precision(self) -> float:
        """Recalled-and-should over recalled-and-labelled; 1.0 when nothing labelled was recalled."""
        return self.hits / (self.hits + self.wrong) if self.hits + self.wrong else 1.0

    @property
    def recall(self) -> float | None:
        """Recalled-and-should over the most that could be recalled (``None``: nothing should be)."""
        return self.hits / self.expected if self.expected else None


def scope_of(text: str) -> Scope:
    return Scope.parse(text)


def evaluate(
    labelled: LabelledSet, embedder: Embedder, workdir: Path, config: MemoryConfig | None = None
) -> list[Outcome]:
    """Store the set's memories in a fresh store under ``workdir`` and ask every query."""
    config = config or MemoryConfig()
    history = HistoryConfig()
    store = Store.open(f"sqlite:///{workdir / 'recall-quality.db'}", dimension=embedder.dimension)
    try:
        service = MemoryService(store, embedder, config, personas=[labelled.persona])
        now = utcnow()
        keys: dict[int, str] = {}
        scopes: dict[str, Scope] = {}
        for m in labelled.memories:
            scope = scope_of(m["scope"])
            memory, _ = service.add(
                labelled.persona,
                scope,
                m["text"],
                m.get("category", "fact"),
                created_at=now - timedelta(days=m.get("age_days", 0)),
            )
            keys[memory.id] = m["key"]
            scopes[m["key"]] = scope
        outcomes = []
        for i, q in enumerate(labelled.queries):
            reach = Reach(labelled.persona, q.channel, q.user)
            reachable = frozenset(k for k, s in scopes.items() if s in reach.scopes())
            text = q.text
            if q.history:
                # The earlier messages, each answered, in a channel of their own (as a turn sees them).
                channel = f"history-{i}"
                with store.write() as conn:
                    store.messages.ensure_channel(conn, channel)
                    for said in q.history:
                        msg = store.messages.add(
                            conn,
                            channel=channel,
                            role="user",
                            author=q.user,
                            persona=labelled.persona,
                            content=said,
                            status="answered",
                        )
                        store.messages.add(
                            conn,
                            channel=channel,
                            role="assistant",
                            author=labelled.persona,
                            persona=labelled.persona,
                            content="(reply)",
                            status="complete",
                            reply_to=msg.id,
                        )
                recalled = EarlierExchanges(store, history).recall(channel, q.user, text, None)
                text = seeded_query(text, recalled, history.tuning.seed_sparse_below)
            # As the recaller does: a query seeded from the user's earlier messages is about them.
            asker: Asker | None = "about" if text != q.text else None
            hits = service.search(SearchQuery(text, reach, config.max_per_reply, now=now, asker=asker)).hits
            outcomes.append(Outcome(q, tuple(keys[h.memory.id] for h in hits), reachable, config.max_per_reply))
        return outcomes
    finally:
        store.close()


def summarise(outcomes: Sequence[Outcome]) -> dict[str, Scores]:
    """Scores per query type, and ``"all"``."""
    groups: dict[str, Scores] = defaultdict(Scores)
    for o in outcomes:
        groups[o.query.type].add(o)
        groups["all"].add(o)
    return dict(groups)


def report(name: str, scores: dict[str, Scores], verbose: bool = False) -> str:
    """A table of one embedder's scores."""
    lines = [f"## {name}", f"{'type':<11} {'queries':>7} {'precision':>9} {'recall':>7} {'silent ok':>10}"]
    for group in (*TYPES, "all"):
        s = scores.get(group)
        if s is None:
            continue
        rec = f"{s.recall:.3f}" if s.recall is not None else "-"
        silent = f"{s.empty_queries - s.empty_violated}/{s.empty_queries}" if s.empty_queries else "-"
        lines.append(f"{group:<11} {s.queries:>7} {s.precision:>9.3f} {rec:>7} {silent:>10}")
    if verbose:
        for o in scores["all"].failures if "all" in scores else []:
            missed = sorted((o.query.recall & o.reachable) - set(o.recalled))
            lines.append(
                f"  [{o.query.type}] {o.query.user}: {o.query.text!r} recalled {list(o.recalled)}"
                f"; wrong {list(o.wrong)}; missed {missed}"
            )
    return "\n".join(lines)


def main(description: str = __doc__ or "") -> None:
    """The command line of bench/recall_quality.py (``description``: its help text)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, help="a labelled set (JSON)")
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="local model(s); default: all")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the queries that missed or overshot")
    parser.add_argument(
        "--everyday",
        nargs="?",
        const=DEFAULT_EVERYDAY,
        type=Path,
        help="measure the everyday set instead (default tests/data/everyday_set.json)",
    )
    args = parser.parse_args()
    if args.everyday is not None:
        everyday = load_everyday(args.everyday)
        print(f"everyday set: {args.everyday} ({everyday.cases} cases, {len(everyday.silent)} silent questions)")
        for model in args.model or list(MODELS):
            with tempfile.TemporaryDirectory(prefix="agentd-everyday-") as tmp:
                tallies = evaluate_everyday(everyday, LocalEmbedder(model), Path(tmp))
            print(everyday_report(model, tallies, args.verbose), flush=True)
        return
    labelled = load_set(args.set)
    print(f"set: {args.set} ({len(labelled.queries)} queries, {len(labelled.memories)} memories)")
    for model in args.model or list(MODELS):
        embedder = LocalEmbedder(model)
        with tempfile.TemporaryDirectory(prefix="agentd-recall-") as tmp:
            scores = summarise(evaluate(labelled, embedder, Path(tmp)))
        print(report(model, scores, args.verbose), flush=True)
