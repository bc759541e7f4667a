"""LoCoMo turn-level recall@k through agentd's memory API: the evaluation bench/locomo.py runs (its
docstring says what it measures and how) and tests/test_locomo_bench.py checks on a tiny file."""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentd.access.scopes import Reach, Scope
from agentd.config import MemoryConfig, MemoryTuning
from agentd.embedders import Embedder
from agentd.embedders.local import DEFAULT_MODEL, MODELS, LocalEmbedder
from agentd.files.cache import cache_dir
from agentd.memory import MemoryService, NewMemory
from agentd.search import Searcher, SearchQuery
from agentd.search.engine import with_mode
from agentd.store import Store
from testkit.embedcache import CachedEmbedder
from testkit.fusiondump import Recorder, write
from testkit.pgembedded import EmbeddedPostgres

PERSONA = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MODES = ("dense", "lexical", "hybrid")
_SESSION = re.compile(r"^session_(\d+)$")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.IGNORECASE)
_MONTHS = {
    m: i
    for i, m in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        start=1,
    )
}


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation."""

    dia_id: str
    speaker: str
    text: str
    session: int
    date: datetime | None


@dataclass(frozen=True)
class Question:
    """One question of categories 1-4 with its evidence turns."""

    conversation: int
    category: int
    question: str
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    """One LoCoMo sample: its turns in order and its questions."""

    index: int
    sample_id: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)


def parse_date(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` as a UTC datetime (``None`` if it does not parse)."""
    m = _DATE.search(text or "")
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    mon = _MONTHS.get(month.lower())
    if mon is None:
        return None
    return datetime(int(year), mon, int(day), h, int(minute), tzinfo=UTC)


def evidence_ids(raw: Sequence[str]) -> tuple[str, ...]:
    """Evidence ids cleaned of the file's typos (``"D8:6; D9:17"``, ``"D:11:26"``)."""
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;,\s]+", item):
            part = part.replace("D:", "D")
            if re.fullmatch(r"D\d+:\d+", part) and part not in out:
                out.append(part)
    return tuple(out)


def load(path: Path) -> list[Conversation]:
    """The conversations of a LoCoMo-format JSON file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for index, sample in enumerate(data):
        conv = sample["conversation"]
        sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)) and isinstance(conv[k], list))
        turns = []
        for s in sessions:
            date = parse_date(conv.get(f"session_{s}_date_time", ""))
            for t in conv[f"session_{s}"]:
                text = t.get("text", "").strip()
                if t.get("blip_caption"):
                    text = f"{text} [shares a photo: {t['blip_caption']}]".strip()
                turns.append(Turn(t["dia_id"], t.get("speaker", ""), text, s, date))
        c = Conversation(index, str(sample.get("sample_id", index)), turns)
        for qa in sample.get("qa", []):
            ev = evidence_ids(qa.get("evidence") or [])
            if qa.get("category") in CATEGORIES and ev:
                c.questions.append(Question(index, qa["category"], qa["question"], ev))
        conversations.append(c)
    return conversations


def memories_of(conv: Conversation, context_turns: int = 2) -> list[NewMemory]:
    """One memory per turn; ``context_turns`` neighbours on each side go into ``metadata["context"]``."""
    scope = Scope.channel(f"locomo-{conv.sample_id}")
    items = []
    for i, turn in enumerate(conv.turns):
        meta: dict[str, Any] = {"dia_id": turn.dia_id, "speaker": turn.speaker, "session": turn.session}
        if context_turns:
            near = [
                conv.turns[j]
                for j in range(max(0, i - context_turns), min(len(conv.turns), i + context_turns + 1))
                if j != i and conv.turns[j].session == turn.session
            ]
            if near:
                meta["context"] = "\n".join(f"{t.speaker}: {t.text}" for t in near)
        items.append(NewMemory(PERSONA, scope, "dialogue", f"{turn.speaker}: {turn.text}", meta, turn.date))
    return items


def ingest(service: MemoryService, conv: Conversation, context_turns: int = 2) -> dict[int, list[str]]:
    """Store one conversation; return ``{memory_id: [dia_ids]}`` (identical turns share one memory)."""
    items = [service.validate(i) for i in memories_of(conv, context_turns)]
    dia: dict[int, list[str]] = defaultdict(list)
    for start in range(0, len(items), 256):
        chunk = items[start : start + 256]
        for item, (mid, _created) in zip(chunk, service.add_many(chunk), strict=True):
            dia[mid].append(item.metadata["dia_id"])
    return dia


def reach_of(conv: Conversation) -> Reach:
    """The search reach of one conversation: its channel (plus the empty global scope)."""
    return Reach(PERSONA, channel=f"locomo-{conv.sample_id}")


@dataclass
class Result:
    """Per-question recall@k values and latencies of one mode."""

    recall: dict[tuple[int, int], list[float]] = field(default_factory=lambda: defaultdict(list))
    latency_ms: list[float] = field(default_factory=list)

    def add(self, category: int, k: int, value: float) -> None:
        self.recall[(category, k)].append(value)
        self.recall[(0, k)].append(value)


def recall_at(found: Sequence[str], evidence: Sequence[str]) -> float:
    """LoCoMo's recall: the fraction of evidence turns among ``found``."""
    got = set(found)
    return sum(1 for e in evidence if e in got) / len(evidence)


def ask(
    service: MemoryService,
    conv: Conversation,
    dia: dict[int, list[str]],
    ks: Sequence[int],
    mode: str,
    result: Result,
    recorder: Recorder | None = None,
    records: list[dict[str, Any]] | None = None,
) -> None:
    """Ask every question of ``conv`` in ``mode``; add recall@k and latency to ``result``.

    With a ``recorder``, each search's fused candidates are appended to ``records``
    (testkit/fusiondump.py).
    """
    reach = reach_of(conv)
    # The default search for hybrid; the one-sided ones through the measuring seam.
    searcher = service.searcher if mode == "hybrid" else with_mode(service.searcher, mode)  # type: ignore[arg-type]
    texts = {mid: conv_text(conv, ids[0]) for mid, ids in dia.items()} if recorder is not None else {}
    for q in conv.questions:
        with recorder or ExitStack():
            t = time.perf_counter()
            hits = searcher.search(SearchQuery(q.question, reach, max(ks), min_relevance=0.0)).hits
            result.latency_ms.append((time.perf_counter() - t) * 1000)
        if recorder is not None and records is not None:
            record = recorder.take(q.question, texts, conversation=conv.index, category=q.category)
            record["evidence"] = list(q.evidence)
            record["dia"] = {str(c[0]): dia.get(c[0], []) for c in record["candidates"]}
            records.append(record)
        ranked = [h.memory.id for h in hits]
        for k in ks:
            top = [d for mid in ranked[:k] for d in dia.get(mid, [])]
            result.add(q.category, k, recall_at(top, q.evidence))


def conv_text(conv: Conversation, dia_id: str) -> str:
    """The stored text of the turn ``dia_id`` (as :func:`memories_of` writes it)."""
    turn = next(t for t in conv.turns if t.dia_id == dia_id)
    return f"{turn.speaker}: {turn.text}"


def percentile(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p * (len(ordered) - 1)))] if ordered else float("nan")


def table(title: str, results: dict[str, Result], ks: Sequence[int]) -> str:
    """One block: a row per (mode, category), a column per k."""
    lines = [f"## {title}", f"{'mode':<8} {'category':<12} {'n':>4} " + " ".join(f"{'R@' + str(k):>6}" for k in ks)]
    for mode, res in results.items():
        for cat in [0, *CATEGORIES]:
            n = len(res.recall.get((cat, ks[0]), []))
            if not n:
                continue
            name = "all" if cat == 0 else f"{cat} {CATEGORIES[cat]}"
            vals = " ".join(f"{statistics.fmean(res.recall[(cat, k)]):>6.3f}" for k in ks)
            lines.append(f"{mode:<8} {name:<12} {n:>4} {vals}")
    return "\n".join(lines)


#: The grid of ``--grid``: lexical_weight x lexical_saturation (e5-small-v2's cosine and bm25 units).
GRID_WEIGHTS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
GRID_SATURATIONS = (5.0, 10.0, 20.0, 30.0)


def grid(
    store: Store,
    embedder: Embedder,
    conversations: Sequence[Conversation],
    dias: Sequence[dict[int, list[str]]],
    dev: set[int],
) -> str:
    """Dev hybrid recall (R@5, R@10, their mean) at every point of the weight grid."""
    lines = [
        "## grid on dev: hybrid (R@5 + R@10) / 2 [R@5 R@10]",
        f"{'weight':>7} " + " ".join(f"{'sat ' + str(int(s)):>22}" for s in GRID_SATURATIONS),
    ]
    for weight in GRID_WEIGHTS:
        cells = []
        for saturation in GRID_SATURATIONS:
            config = MemoryConfig(tuning=MemoryTuning(lexical_weight=weight, lexical_saturation=saturation))
            service = MemoryService(store, embedder, config, personas=[PERSONA], check_embedding=False)
            res = Result()
            for conv, dia in zip(conversations, dias, strict=True):
                if conv.index in dev:
                    ask(service, conv, dia, (5, 10), "hybrid", res)
            r5, r10 = statistics.fmean(res.recall[(0, 5)]), statistics.fmean(res.recall[(0, 10)])
            cells.append(f"{(r5 + r10) / 2:.4f} [{r5:.3f} {r10:.3f}]")
        lines.append(f"{weight:>7.2f} " + " ".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def run(
    path: Path,
    ks: Sequence[int],
    modes: Sequence[str],
    dev: set[int] | None,
    workdir: Path,
    embedder: Embedder | None = None,
    context_turns: int = 2,
    url: str | None = None,
    with_grid: bool = False,
    limit: int | None = None,
    config: MemoryConfig | None = None,
    rounds: int = 3,
    dump: Path | None = None,
) -> str:
    """Ingest and ask; return the printed report (into the store at ``url``, default a SQLite file in ``workdir``).

    ``dump``: write each hybrid search's fused candidates there (testkit/fusiondump.py).
    """
    conversations = load(path)[:limit]
    embedder = embedder or LocalEmbedder()
    store = Store.open(url or f"sqlite:///{workdir / 'locomo.db'}", dimension=embedder.dimension)
    service = MemoryService(store, embedder, config or MemoryConfig(), personas=[PERSONA])
    try:
        t = time.perf_counter()
        dias = [ingest(service, c, context_turns) for c in conversations]
        ingest_s = time.perf_counter() - t
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        n_turns = sum(len(c.turns) for c in conversations)
        # As `agentd serve` does once loaded: what lives for the whole run stays out of the
        # collector's full passes, which otherwise land on random searches.
        gc.freeze()
        # Warm up (first query pays for page cache and lazy init).
        for c in conversations[:1]:
            for q in c.questions[:5]:
                service.search(SearchQuery(q.question, reach_of(c), max(ks), min_relevance=0.0))
        splits: dict[str, dict[str, Result]] = {"all": {}}
        if dev is not None:
            splits = {"dev": {}, "held-out": {}, "all": {}}
        recorder = Recorder() if dump is not None else None
        records: list[dict[str, Any]] = []
        for mode in modes:
            for split in splits.values():
                split[mode] = Result()
            for conv, dia in zip(conversations, dias, strict=True):
                res = Result()
                ask(service, conv, dia, ks, mode, res, recorder if mode == "hybrid" else None, records)
                names = ["all"] if dev is None else ["all", "dev" if conv.index in dev else "held-out"]
                for name in names:
                    target = splits[name][mode]
                    for key, vals in res.recall.items():
                        target.recall[key].extend(vals)
                    target.latency_ms.extend(res.latency_ms)
        if recorder is not None and dump is not None:
            write(dump, recorder, service.fusion, "locomo", max(ks), records)
        latency = latency_pass(service, conversations, modes, max(ks), rounds)
        grid_report = grid(store, embedder, conversations, dias, dev) if with_grid and dev is not None else None
    finally:
        store.close()
    out = [
        f"store: {store.backend}",
        (
            f"file: {path}; {len(conversations)} conversations, {n_turns} turns, "
            f"{sum(len(c.questions) for c in conversations)} questions (categories 1-4 with evidence)"
        ),
        f"embedder: {embedder.model_id}",
        (
            f"ingest: {n_turns / ingest_s:.0f} memories/s end-to-end"
            " (MemoryService.add_many: embed + rows + vectors + words)"
        ),
    ]
    if dev is not None:
        out.append(
            f"dev conversations: {sorted(dev)}; held-out: {[c.index for c in conversations if c.index not in dev]}"
        )
    for name, results in splits.items():
        if any(r.latency_ms for r in results.values()):
            out.append(table(name, results, ks))
    out.append(f"## search latency, query embedding included ({rounds} interleaved rounds of every question)")
    for mode, samples in latency.items():
        out.append(f"{mode:<8} p50 {percentile(samples, 0.5):.2f} ms   p95 {percentile(samples, 0.95):.2f} ms")
    if grid_report:
        out.append(grid_report)
    return "\n".join(out)


#: Rounds of the latency pass; each round asks every question once in every mode.
LATENCY_ROUNDS = 3


def latency_pass(
    service: MemoryService,
    conversations: Sequence[Conversation],
    modes: Sequence[str],
    pool: int,
    rounds: int = LATENCY_ROUNDS,
) -> dict[str, list[float]]:
    """Time every question in every mode, interleaved (the modes of one question back to back, in
    rotating order), so a slower or busier stretch of the machine does not land on one mode.

    ``recall`` is the search as the recall skill and automatic retrieval call it: hybrid with
    their defaults (limit ``memory.search_results``, threshold ``memory.min_score``); the modes
    ask for ``pool`` results with no threshold, as the recall@k pass does.
    """
    default = service.searcher
    runs: list[tuple[str, Searcher, dict[str, Any]]] = [
        (m, default if m == "hybrid" else with_mode(default, m), {"limit": pool, "min_relevance": 0.0})  # type: ignore[arg-type]
        for m in modes
    ]
    runs.append(("recall", default, {}))
    samples: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    turn = 0
    for _ in range(rounds):
        for conv in conversations:
            reach = reach_of(conv)
            for q in conv.questions:
                turn += 1
                for name, searcher, kwargs in runs[turn % len(runs) :] + runs[: turn % len(runs)]:
                    t = time.perf_counter()
                    searcher.search(SearchQuery(q.question, reach, **kwargs))
                    samples[name].append((time.perf_counter() - t) * 1000)
    return samples


def run_real(
    path: Path,
    ks: Sequence[int],
    dev: set[int] | None,
    workdir: Path,
    embedder: Embedder,
    keep: str = "user",
    context_turns: int = 2,
    url: str | None = None,
    limit: int | None = None,
) -> str:
    """Replay each conversation through the runtime, let episodic memory index it, ask; return the report."""
    from agentd.app import App
    from agentd.config import LoggingConfig, load_config
    from agentd.observe.log import configure
    from agentd.runtime import Runtime

    configure(LoggingConfig(level="warning", format="console"))

    conversations = load(path)[:limit]
    home = workdir / "real"
    (home / "personas").mkdir(parents=True, exist_ok=True)
    (home / "personas" / "locomo.toml").write_text(
        f'name = "{PERSONA}"\nmodel = "offline"\nmax_reply_tokens = 256\ncontext_window = 2048\nskills = []\n'
        'system_prompt = "You are a participant\'s notebook."\n'
    )
    db = url or f"sqlite:///{home / 'real.db'}"
    (home / "agentd.toml").write_text(
        f'[database]\nurl = "{db}"\n[logging]\nlevel = "warning"\n'
        "[memory]\nretrieval_timeout_seconds = 120\n[history]\nenabled = false\n"
        f'[episodes]\nkeep = "{keep}"\ncontext_messages = {context_turns}\nmax_per_reply = {min(50, max(ks))}\n'
        "min_score = 0.0\nbatch_size = 64\n"
        # A replay submits a whole conversation at once: admission control (a chat's bound) off.
        "[daemon]\nmax_pending = 1000000000\nmax_pending_per_channel = 1000000000\n"
    )
    app = App(load_config(home / "agentd.toml", environ={}), embedder=embedder)
    rt = Runtime(app)
    dia_of: dict[int, str] = {}
    results: dict[str, Result] = {"all": Result()}
    if dev is not None:
        results = {"dev": Result(), "held-out": Result(), "all": Result()}
    try:
        t = time.perf_counter()
        for conv in conversations:
            channel = f"locomo-{conv.sample_id}"
            seen: dict[int, int] = defaultdict(int)
            for turn in conv.turns:
                at = turn.date + timedelta(seconds=seen[turn.session]) if turn.date is not None else None
                seen[turn.session] += 1
                user = re.sub(r"\s+", "_", turn.speaker) or "speaker"
                accepted = rt.submit(PERSONA, channel, user, turn.text or "(no text)", at=at)
                dia_of[accepted.message_id] = turn.dia_id
        if not rt.wait_idle(3600):
            raise SystemExit("the replayed turns were not all answered within an hour")
        replay_s = time.perf_counter() - t
        if not rt.learning_idle(3600):
            raise SystemExit("episodic indexing did not finish within an hour")
        index_s = time.perf_counter() - t
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        for conv in conversations:
            channel = f"locomo-{conv.sample_id}"
            names = ["all"] if dev is None else ["all", "dev" if conv.index in dev else "held-out"]
            for q in conv.questions:
                start = time.perf_counter()
                found = rt.preview(PERSONA, channel, None, q.question).retrieval.episodes
                elapsed = (time.perf_counter() - start) * 1000
                ranked = [dia_of.get(h.memory.source_message_id or 0) for h in found]
                for name in names:
                    results[name].latency_ms.append(elapsed)
                    for k in ks:
                        results[name].add(q.category, k, recall_at([d for d in ranked[:k] if d], q.evidence))
    finally:
        rt.stop(grace=5)
        app.close()
    n_turns = sum(len(c.turns) for c in conversations)
    out = [
        f"path: real (runtime replay, episodic memory, keep = {keep!r}, {context_turns} earlier messages as context)",
        f"store: {db.split(':', 1)[0]}",
        f"file: {path}; {len(conversations)} conversations, {n_turns} turns",
        f"embedder: {embedder.model_id}",
        f"replay: {n_turns / replay_s:.0f} turns/s answered; indexed {n_turns / index_s:.0f} turns/s end-to-end",
    ]
    for name, res in results.items():
        if res.latency_ms:
            out.append(table(f"{name} (real path)", {"hybrid": res}, ks))
    lat = results["all"].latency_ms
    p50, p95 = percentile(lat, 0.5), percentile(lat, 0.95)
    out.append(f"turn preparation (retrieval included) p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    return "\n".join(out)


def main(description: str = __doc__ or "") -> None:
    """The command line of bench/locomo.py (``description``: its help text)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--k", default="1,5,10,25", help="comma-separated cut-offs")
    parser.add_argument("--modes", default=",".join(MODES), help="search modes to report (dense, lexical, hybrid)")
    parser.add_argument(
        "--dev", default=None, help="comma-separated conversation indexes used for development; the rest are held-out"
    )
    parser.add_argument(
        "--context-turns",
        type=int,
        default=2,
        help="neighbouring turns on each side stored as metadata['context'] (0: none)",
    )
    parser.add_argument("--dir", help="where to keep the SQLite database (default: a temp dir)")
    parser.add_argument(
        "--store", default="sqlite", help="comma-separated backends to measure, one after the other: sqlite, postgres"
    )
    parser.add_argument("--grid", action="store_true", help="with --dev: dev hybrid recall over a fusion weight grid")
    parser.add_argument(
        "--path",
        default="direct",
        choices=("direct", "real", "both"),
        help="direct: turns ingested as memories; real: replayed through the runtime and episodic memory",
    )
    parser.add_argument(
        "--keep", default="user", choices=("user", "exchange"), help="with --path real: [episodes] keep"
    )
    parser.add_argument("--limit", type=int, help="only the first N conversations")
    parser.add_argument("--rounds", type=int, default=LATENCY_ROUNDS, help="rounds of the latency pass (0: none)")
    parser.add_argument("--lexical-weight", type=float, help="[memory.tuning] lexical_weight (default: the embedder's)")
    parser.add_argument(
        "--lexical-saturation", type=float, help="[memory.tuning] lexical_saturation (default: the embedder's)"
    )
    parser.add_argument(
        "--cache",
        default="",
        help="stored texts' vectors kept in this directory between runs (testkit/embedcache.py; default: agentd's "
        "cache directory, bench-embeddings/; 'none': no cache)",
    )
    parser.add_argument(
        "--dump", type=Path, help="write each hybrid search's fused candidates here (JSON; bench/fusion_replay.py)"
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=sorted(MODELS),
        help="the local embedding model (each with its own calibration and hybrid weights)",
    )
    args = parser.parse_args()
    ks = sorted(int(k) for k in args.k.split(","))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            parser.error(f"unknown mode {m!r}; use {', '.join(MODES)}")
    dev = {int(i) for i in args.dev.split(",")} if args.dev else None
    stores = [s.strip() for s in args.store.split(",") if s.strip()]
    for s in stores:
        if s not in ("sqlite", "postgres"):
            parser.error(f"unknown store {s!r}; use sqlite, postgres")
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="agentd-locomo-"))
    if args.cache == "none":
        embedder: Embedder = LocalEmbedder(args.model)
    else:
        embedder = CachedEmbedder(
            LocalEmbedder(args.model), Path(args.cache) if args.cache else cache_dir() / "bench-embeddings"
        )
    for name in stores:
        with ExitStack() as stack:
            url = None
            if name == "postgres":
                url = stack.enter_context(EmbeddedPostgres()).create_database("locomo")
            else:
                (workdir / "locomo.db").unlink(missing_ok=True)
            if args.path in ("direct", "both"):
                config = MemoryConfig(
                    tuning=MemoryTuning(lexical_weight=args.lexical_weight, lexical_saturation=args.lexical_saturation)
                )
                report = run(
                    args.file,
                    ks,
                    modes,
                    dev,
                    workdir,
                    embedder,
                    args.context_turns,
                    url,
                    args.grid,
                    args.limit,
                    config,
                    args.rounds,
                    args.dump,
                )
                print(report, flush=True)
            if args.path in ("real", "both"):
                real_url = None
                if name == "postgres":
                    real_url = stack.enter_context(EmbeddedPostgres()).create_database("locomo_real")
                else:
                    (workdir / "real" / "real.db").unlink(missing_ok=True)
                report = run_real(
                    args.file, ks, dev, workdir, embedder, args.keep, args.context_turns, real_url, args.limit
                )
                print(report, flush=True)
