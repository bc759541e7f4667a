"""The CPU one turn costs, and what that allows on this machine.

    python bench/turn_cpu.py --turns 200 --history 100 --memories 1000

Runs turns one after another through the runtime, in this process, with no HTTP
and nothing else competing: the shipped ``buddy`` persona on the offline model
(the daemon's own work, no model time), on a store seeded like
``bench/daemon.py``'s (``--history`` messages per channel, ``--memories`` global
memories), then the no-op persona (``disable_memory``, no tools). For each it
prints, per turn:

* the process's CPU time (every thread: the actor, retrieval, the background
  jobs that index the exchange as an episode);
* of that, the CPU the local embedder used (the query, and the episode written
  after the reply), measured per call with the calling thread's CPU clock;
* of that, the offline model's own CPU (it stands in for a real model, and counts
  the prompt's tokens for its usage figures as a provider would), measured the same
  way, and the turn's own work: everything but the model;
* SQL statements and transactions;
* each stage's wall time, p50, from the turns' ``turn`` log lines (history, retrieval,
  assembly, the model, storing the reply), and the turn less its model stage;

and the ceilings they imply: replies/s on all the machine's cores if every part
ran in parallel, and, for the part that is Python (everything but the embedder,
which runs outside the GIL, and the model), replies/s on one core.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from daemon import FACTS, FLOOR_PERSONA, QUESTIONS, STAGES, fill, pct, seed, write_home  # noqa: E402


class CpuClock:
    """CPU seconds spent in wrapped calls, by kind (the embedder's queries and passages, the model),
    from every thread: each call measured with its own thread's CPU clock."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def wrap(self, kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds[kind] += time.thread_time() - started
                    self.calls[kind] += 1

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="measured turns per persona")
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--history", type=int, default=100, help="earlier messages in each channel")
    parser.add_argument("--memories", type=int, default=1000, help="global memories in reach")
    parser.add_argument(
        "--user-memories",
        type=int,
        default=0,
        help="memories of each of the three asking users (user scope): a decision's own candidates, which the "
        "cross-encoder reorders ([memory] rerank); 0 leaves that path out, as before",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import sqlalchemy as sa
    import structlog.testing

    from agentd.app import App
    from agentd.config import load_config
    from agentd.embedders.local import LocalEmbedder
    from agentd.llm import offline
    from agentd.observe.log import configure
    from agentd.runtime import Runtime

    clock = CpuClock()
    LocalEmbedder.embed = clock.wrap("passages", LocalEmbedder.embed)  # type: ignore[method-assign]
    LocalEmbedder.embed_queries = clock.wrap("queries", LocalEmbedder.embed_queries)  # type: ignore[method-assign]
    # The offline model stands in for a real one: its own CPU (it plans its reply from the prompt, and
    # counts the prompt's tokens for its usage figures, as a provider would) is the model's time, not
    # the turn's. Streaming its words (on_text) is the turn's.
    offline.plan = clock.wrap("model", offline.plan)  # type: ignore[assignment]
    offline._usage = clock.wrap("model", offline._usage)

    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="agentd-turn-cpu-"))
    try:
        config_path = write_home(home)
        channels = [f"dm-bench-{i}" for i in range(args.channels)]
        seed(config_path, channels, args.history, args.memories, rng)
        # Only the single-key overrides (AGENTD_MEMORY__RERANK=false) reach the bench's config.
        overrides = {k: v for k, v in os.environ.items() if k.startswith("AGENTD_") and "__" in k}
        config = load_config(config_path, environ=overrides)
        # Info, so that each turn's ``turn`` line (its stages' wall times) is logged; captured, not printed.
        configure(config.logging.model_copy(update={"level": "info"}))
        app = App(config)
        runtime = Runtime(app)
        if args.user_memories:
            from agentd.access.scopes import Scope

            for u in range(3):
                for _ in range(args.user_memories):
                    app.memory.add("buddy", Scope.user(f"user{u}"), fill(rng.choice(FACTS), rng))
        statements: Counter[str] = Counter()

        @sa.event.listens_for(app.store.engine, "before_cursor_execute")
        def _count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            word = statement.split(None, 1)[0].upper()
            statements["transactions" if word == "BEGIN" else "statements"] += 1

        def run(persona: str, i: int) -> None:
            channel = channels[i % len(channels)] if persona == "buddy" else f"floor-{i % args.channels}"
            text = fill(rng.choice(QUESTIONS), rng)
            for _event in runtime.chat(persona, channel, f"user{i % 3}", text, disable_memory=persona != "buddy"):
                pass

        print(
            f"bench/turn_cpu.py: {args.turns} turns per persona, one at a time, {args.channels} channels, "
            f"history {args.history}/channel, memories {args.memories}, user memories {args.user_memories}; "
            f"cpus {os.cpu_count()}; "
            f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
        )
        try:
            with structlog.testing.capture_logs() as logged:  # the turn lines, not printed
                for persona in ("buddy", FLOOR_PERSONA):
                    for i in range(10):  # warm: the model, the tokenizers, the actors
                        run(persona, i)
                    runtime.learning_idle(60)
                    clock.seconds.clear()
                    clock.calls.clear()
                    statements.clear()
                    logged.clear()
                    cpu, wall = time.process_time(), time.perf_counter()
                    for i in range(args.turns):
                        run(persona, i)
                    runtime.learning_idle(60)  # the episodes of these turns are part of their cost
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    report(persona, args.turns, cpu, wall, clock, statements)
                    stages([e for e in logged if e.get("event") == "turn" and e.get("outcome") == "answered"])
        finally:
            runtime.stop()
            app.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def report(persona: str, turns: int, cpu: float, wall: float, clock: CpuClock, statements: Counter[str]) -> None:
    per = cpu * 1000 / turns
    model = clock.seconds["model"] * 1000 / turns
    embedding = (clock.seconds["queries"] + clock.seconds["passages"]) * 1000 / turns
    python = per - embedding - model
    cores = os.cpu_count() or 1
    print(f"\n[{persona}]")
    print(f"  CPU per turn        {per:.1f} ms (wall {wall * 1000 / turns:.1f} ms)")
    for kind in ("queries", "passages"):
        calls = clock.calls[kind]
        if calls:
            print(
                f"    embedder, {kind:<8} {clock.seconds[kind] * 1000 / turns:.1f} ms per turn "
                f"({calls / turns:.2f} calls, {clock.seconds[kind] * 1000 / calls:.1f} ms each)"
            )
    print(f"    the model (offline) {model:.1f} ms")
    print(f"    everything else   {python:.1f} ms")
    print(f"  the turn's own work (all but the model) {per - model:.1f} ms per turn")
    print(
        f"  SQL per turn        {statements['statements'] / turns:.1f} statements, "
        f"{statements['transactions'] / turns:.1f} transactions"
    )
    print(
        f"  ceilings            {cores * 1000 / per:.0f} replies/s on {cores} cores in parallel; "
        f"{1000 / python:.0f} replies/s for the Python part on one core (the GIL)"
    )


def stages(turns: list[dict[str, Any]]) -> None:
    """The p50 of each stage's wall time, from the turns' ``turn`` log lines (as bench/daemon.py
    reads them from the daemon's log), and of the turn less its model stage."""
    if not turns:
        return
    p50 = "  ".join(f"{label} {pct([float(t[key]) for t in turns], 0.5):.1f}" for label, key in STAGES)
    own = pct([float(t["ms"]) - float(t["model_ms"]) for t in turns], 0.5)
    print(f"  stages, wall p50 ms {p50}   ({len(turns)} turns)")
    print(f"  the turn less its model stage, wall p50 {own:.1f} ms (the episode is indexed after it)")


if __name__ == "__main__":
    main()
