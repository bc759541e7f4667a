"""What checking the spend caps costs a turn, and what keeping the per-day rows costs a reply.

    python bench/caps.py [--days 7] [--personas 10] [--users 2000] [--runs 2000]

A SQLite store is filled with ``usage_days`` rows: every persona answering every user with two
models on each of ``--days`` days (``days × personas × users × 2`` rows). Then it times:

* ``SpendCaps.check`` of a persona with both caps and a user under ``[users] max_tokens_per_day``
  (two indexed reads: the persona's totals for today, the user's rows; then pricing): p50 / p95;
* the same with no cap configured (what every turn pays by default: nothing is read);
* one reply's ``SpendRepo.add`` inside a write transaction, against the transaction alone.

Prints the query plan too, so the index the check uses is visible.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.config import load_config  # noqa: E402
from agentd.personas import Persona, Personas  # noqa: E402
from agentd.spend.caps import SpendCaps, day_of  # noqa: E402
from agentd.store import Store  # noqa: E402
from agentd.store.spend import Spent  # noqa: E402


def persona(name: str, tokens: int, cost: float) -> Persona:
    """A persona with the given caps (its other fields do not matter here)."""
    return Persona(
        name, "openai/gpt-4o-mini", "x", "", 256, None, None, (), (), None, None, None, "bench", (), tokens, cost
    )


def timed(runs: int, call: Callable[[], object]) -> tuple[float, float]:
    """p50 and p95 of ``call``, in microseconds."""
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        took.append((time.perf_counter() - start) * 1e6)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.95)]


def fill(store: Store, days: int, personas: int, users: int) -> None:
    """``days × personas × users × 2`` rows, today's included."""
    today = datetime.now(UTC)
    for d in range(days):
        day = day_of(today - timedelta(days=d))
        rows = [
            Spent(day, f"p{p}", f"user{u}", model, 500, 50)
            for p in range(personas)
            for u in range(users)
            for model in ("openai/gpt-4o-mini", "local/unpriced")
        ]
        with store.write() as conn:
            store.spend.add(conn, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--personas", type=int, default=10)
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "agentd.toml").write_text(
            f'[database]\nurl = "sqlite:///{home}/agentd.db"\n[users]\nmax_tokens_per_day = 1000000000\n'
        )
        cfg = load_config(home / "agentd.toml", environ={})
        store = Store.open(cfg.database_url)
        started = time.perf_counter()
        fill(store, args.days, args.personas, args.users)
        rows = args.days * args.personas * args.users * 2
        print(f"{rows:,} usage_days rows written in {time.perf_counter() - started:.1f} s")
        capped, free = persona("p3", 10**12, 10**6), persona("p4", 0, 0)
        caps = SpendCaps(cfg, store, Personas({"p3": capped, "p4": free}))
        caps.check(capped, "user7")  # the first call imports and warms litellm's price lookup
        p50, p95 = timed(args.runs, lambda: caps.check(capped, "user7"))
        print(f"check, persona caps + user cap: p50 {p50:.0f} µs, p95 {p95:.0f} µs")
        nocaps = caps.capped(free, None)
        p50, p95 = timed(args.runs, lambda: caps.check(free, None))
        print(f"check, no cap configured (capped={nocaps}): p50 {p50:.1f} µs, p95 {p95:.1f} µs")
        one = [Spent(day_of(datetime.now(UTC)), "p3", "user7", "openai/gpt-4o-mini", 900, 40)]

        def write(with_row: bool) -> None:
            with store.write() as conn:
                if with_row:
                    store.spend.add(conn, one)

        base = timed(args.runs // 4, lambda: write(False))
        added = timed(args.runs // 4, lambda: write(True))
        print(f"write transaction alone: p50 {base[0]:.0f} µs; with one reply's row: p50 {added[0]:.0f} µs")
        today = day_of(datetime.now(UTC))
        with store.read() as conn:
            for where, values in (("persona = ? AND user_id = ':all'", ("p3",)), ("user_id = ?", ("user7",))):
                sql = f"EXPLAIN QUERY PLAN SELECT * FROM usage_days WHERE day = ? AND {where}"
                plan = conn.exec_driver_sql(sql, (today, *values)).all()
                print(f"plan ({where}):", "; ".join(str(r[-1]) for r in plan))
        store.close()


if __name__ == "__main__":
    main()
