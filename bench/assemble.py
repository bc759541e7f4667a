"""Latency of one prompt assembly, for a channel of 100 and of 100,000 messages.

    python bench/assemble.py [--sizes 100,100000] [--window 32768] [--runs 200]

One assembly = ContextBuilder.build: read recent history from SQLite (token
counts cached), load the project file, count the system prompt and the current
message with the model's tokenizer, and run the assembler with three memories.
Prints p50/p95, how many messages each assembly read (bounded by the window,
not by the channel), and SQLite's query plan for the history page query.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.access.scopes import GLOBAL  # noqa: E402
from agentd.config import load_config  # noqa: E402
from agentd.llm.models import max_input_tokens  # noqa: E402
from agentd.llm.tokens import counter_for  # noqa: E402
from agentd.personas import Persona  # noqa: E402
from agentd.prompt.builder import ContextBuilder  # noqa: E402
from agentd.prompt.windows import WindowMap  # noqa: E402
from agentd.search.ranking import MemoryHit  # noqa: E402
from agentd.store import Store  # noqa: E402
from agentd.store.memories import Memory  # noqa: E402

LINES = [
    "Can you check whether the deploy on Friday is still on?",
    "Yes - the release train leaves at 16:00 UTC, the changelog is in the wiki.",
    "I moved the design review to Thursday, the room was double booked.",
    "Noted. I'll remind you on Wednesday afternoon about the review prep.",
]


class Counting:
    """Wraps the model's counter to see how many texts an assembly counts."""

    def __init__(self, model: str) -> None:
        self._inner = counter_for(model)
        self.name = self._inner.name
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return self._inner.count(text)


def fill(store: Store, channel: str, n: int) -> None:
    with store.write() as conn:
        for i in range(n):
            store.messages.add(
                conn,
                channel=channel,
                role="user" if i % 2 == 0 else "assistant",
                author="alice" if i % 2 == 0 else "buddy",
                content=f"{LINES[i % 4]} (#{i})",
                status="answered",
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,100000")
    parser.add_argument("--window", type=int, default=32_768)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="agentd-assemble-"))
    (workdir / "agentd.toml").write_text('[database]\nurl = "sqlite:///a.db"\n')
    (workdir / "personas").mkdir()
    cfg = load_config(workdir / "agentd.toml", environ={})
    store = Store.open(cfg.database_url)
    persona = Persona(
        "bench",
        "offline",
        "You are a helpful assistant. " * 10,
        "",
        1024,
        args.window,
        None,
        (),
        (),
        None,
        None,
        None,
        "bench",
    )
    counting = Counting(persona.model)
    builder = ContextBuilder(store, cfg, WindowMap(cfg.models, max_input_tokens), lambda _m: counting)
    mems = [
        MemoryHit(
            Memory(
                i,
                "bench",
                GLOBAL,
                "fact",
                f"Remembered fact number {i} about the release train",
                {},
                datetime(2025, 1, 1, tzinfo=UTC),
                "h",
            ),
            0.8,
            0.8,
        )
        for i in range(3)
    ]

    print(f"window {args.window:,} tokens, tokenizer {counting.name}, {args.runs} runs each")
    print(f"{'messages':>10} {'p50':>8} {'p95':>8} {'read':>6} {'included':>9} {'counted/run':>12}")
    for size in sorted(int(s) for s in args.sizes.split(",")):
        channel = f"c{size}"
        fill(store, channel, size)
        builder.build(persona, channel, "What is on this week?", memories=mems)  # counts cached once
        samples, counted = [], 0
        for _ in range(args.runs):
            counting.calls = 0
            t = time.perf_counter()
            ctx = builder.build(persona, channel, "What is on this week?", memories=mems)
            samples.append((time.perf_counter() - t) * 1000)
            counted = counting.calls
        samples.sort()
        read = ctx.budget.history_messages + (1 if ctx.budget.messages_dropped else 0)
        print(
            f"{size:>10,} {statistics.median(samples):>6.2f}ms {samples[int(0.95 * (len(samples) - 1))]:>6.2f}ms "
            f"{read:>6} {ctx.budget.history_messages:>9} {counted:>12}"
        )
    with store.read() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT * FROM messages WHERE channel = ? AND role IN ('user','assistant') "
            "AND id < ? ORDER BY id DESC LIMIT 200",
            ("c100000", 10**9),
        ).fetchall()
    print("history page query plan:", "; ".join(row[-1] for row in plan))
    store.close()


if __name__ == "__main__":
    main()
