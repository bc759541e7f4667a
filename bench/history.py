"""Latency of the user-history step for a user with many earlier messages.

    python bench/history.py [--messages 10000] [--runs 200]

One step = EarlierExchanges.recall: read the recent window, read at most
``history.tuning.max_inspected`` of the user's newest earlier messages (index
``ix_messages_channel_author_id``), tokenise and match them against the query,
fetch the replies of the accepted ones, condense, harvest seeds. The channel
holds the user's messages, each answered, interleaved with another user's.
Prints p50/p95 for a query that matches often, one that matches nothing (the
worst case: every inspected message is tokenised) and a sparse follow-up, how
many messages each inspected (bounded by max_inspected, not by the history),
and SQLite's query plan for the candidate query.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.config import load_config  # noqa: E402
from agentd.recall.earlier import EarlierExchanges  # noqa: E402
from agentd.store import Store  # noqa: E402

TOPICS = [
    "Can you check whether the deploy on Friday is still on, and who signs off the changelog?",
    "I moved the design review to Thursday because the big room was double booked again.",
    "What did the vendor say about the invoice for the new laptops and the docking stations?",
    "Remind me which hiking trail near Boulder had the waterfall and the steep last mile.",
    "我们下周三在上海开会，记得订酒店和机票。",
    "Let's plan the garden: tomatoes along the fence, herbs by the kitchen door 🌿🍅.",
]
QUERIES = {
    "matching": "when is the design review and which room did we book?",
    "no match": "explain quantum entanglement to a ten year old",
    "sparse follow-up": "and what about the second one?",
}


def fill(store: Store, channel: str, n: int) -> None:
    """``n`` messages of alice, each answered, interleaved with bob's (4n messages in all)."""
    with store.write() as conn:
        for i in range(n):
            for author in ("alice", "bob"):
                msg = store.messages.add(
                    conn,
                    channel=channel,
                    role="user",
                    author=author,
                    persona="bench",
                    content=f"{TOPICS[i % len(TOPICS)]} (#{i})",
                    status="answered",
                )
                store.messages.add(
                    conn,
                    channel=channel,
                    role="assistant",
                    author="bench",
                    persona="bench",
                    content=f"Sure - noted about item {i}; I'll keep that in mind.",
                    status="complete",
                    reply_to=msg.id,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000, help="earlier messages of the user")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="agentd-history-"))
    (workdir / "agentd.toml").write_text('[database]\nurl = "sqlite:///h.db"\n')
    (workdir / "personas").mkdir()
    cfg = load_config(workdir / "agentd.toml", environ={})
    store = Store.open(cfg.database_url)
    t = time.perf_counter()
    fill(store, "general", args.messages)
    print(
        f"filled {args.messages:,} messages of the user ({4 * args.messages:,} in the channel) "
        f"in {time.perf_counter() - t:.1f}s",
        file=sys.stderr,
    )
    history = EarlierExchanges(store, cfg.history)
    h = cfg.history
    print(
        f"user messages {args.messages:,}; max_inspected {h.tuning.max_inspected}, max_snippets {h.max_snippets}, "
        f"recent_window {h.recent_window}; {args.runs} runs each"
    )
    print(f"{'query':<18} {'p50':>8} {'p95':>8} {'inspected':>10} {'snippets':>9} seeds")
    for name, query in QUERIES.items():
        found = history.recall("general", "alice", query, None)
        samples = []
        for _ in range(args.runs):
            t = time.perf_counter()
            found = history.recall("general", "alice", query, None)
            samples.append((time.perf_counter() - t) * 1000)
        samples.sort()
        print(
            f"{name:<18} {statistics.median(samples):>6.2f}ms {samples[int(0.95 * (len(samples) - 1))]:>6.2f}ms "
            f"{found.inspected:>10} {len(found.exchanges):>9} {', '.join(found.seeds)}"
        )
    with store.read() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT * FROM messages WHERE channel = ? AND author = ? AND id < ? "
            "AND role = 'user' ORDER BY id DESC LIMIT 200",
            ("general", "alice", 10**9),
        ).fetchall()
    print("candidate query plan:", "; ".join(row[-1] for row in plan))
    store.close()


if __name__ == "__main__":
    main()
