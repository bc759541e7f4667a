"""What a room costs: CPU per reply in a three-persona room against a one-persona channel with the
same history, and the latency a chain of persona-to-persona replies adds beyond the model's time.

    python bench/rooms.py [--history 2000] [--turns 100] [--model-ms 50]

In this process, through the runtime (no HTTP), on the offline model, without an embedder
(``[embedding] provider = "none"``) so what is measured is the turn's own work:

* **CPU per reply**: ``--history`` messages are stored in ``solo`` (bound to ``alpha``) and in
  ``room`` (``alpha``, ``beta``, ``gamma``, ``answer = "rotate"``: one reply per message, the
  replies in the history spread over the three), the same texts; then ``--turns`` messages are
  answered in each, one after another, and the process's CPU time per reply is printed (p50 of
  batches, and the mean), with how many history messages each prompt carried. The room's
  transcript is rendered from each persona's side (every other line attributed): this is what
  that costs, with the history cache on (SQLite) as in a daemon.
* **Chain latency**: in a room with ``answer = "addressed"``, ``max_persona_turns = 2``, the
  message "@alpha what do you think?" makes a chain of three replies, one after the other (each
  reply of the stand-in model ends by naming the other persona): alpha's, beta's answer to it,
  alpha's answer to that (its call on beta is stopped). Each model call takes ``--model-ms``
  more (a sleep standing in for a model). Printed: the wall time from the post to the last
  reply stored, the model's share, and the rest per reply (preparing, storing the reply with
  its trigger, routing the trigger: what a chain adds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentd.app import App  # noqa: E402
from agentd.config import load_config  # noqa: E402
from agentd.llm.chat import LitellmChat  # noqa: E402
from agentd.observe.log import configure  # noqa: E402
from agentd.runtime import Done, Error, Runtime  # noqa: E402

TEXTS = [
    "Can you check whether the deploy on Friday is still on, and who signs off the changelog?",
    "I moved the design review to Thursday because the big room was double booked again.",
    "What did the vendor say about the invoice for the new laptops and the docking stations?",
    "Let's plan the garden: tomatoes along the fence, herbs by the kitchen door.",
]
TRIO = ("alpha", "beta", "gamma")
#: Replies in the measured chain.
LINKS = 3


def write_home(home: Path) -> Path:
    (home / "personas").mkdir(parents=True)
    for name in TRIO:
        (home / "personas" / f"{name}.toml").write_text(
            f'name = "{name}"\nmodel = "offline"\nmax_reply_tokens = 256\nskills = []\n'
            f'system_prompt = "You are {name}. Answer briefly."\n'
        )
    config = home / "agentd.toml"
    config.write_text(
        '[database]\nurl = "sqlite:///bench.db"\n[embedding]\nprovider = "none"\n[logging]\nlevel = "warning"\n'
        "[daemon]\nmax_pending = 1000000\nmax_pending_per_channel = 1000000\n"
        '[channels.solo]\npersonas = ["alpha"]\n'
        '[channels.room]\npersonas = ["alpha", "beta", "gamma"]\nanswer = "rotate"\n'
        '[channels.chain]\npersonas = ["alpha", "beta", "gamma"]\nmax_persona_turns = 2\n'
    )
    return config


def fill(app: App, channel: str, personas: tuple[str, ...], n: int) -> None:
    """``n`` exchanges: a person's message and a reply, the replies taking turns among ``personas``."""
    rows: list[dict[str, Any]] = []
    for i in range(n):
        persona = personas[i % len(personas)]
        text = f"{TEXTS[i % len(TEXTS)]} (#{i})"
        rows.append(
            {
                "channel": channel,
                "role": "user",
                "author": f"user{i % 3}",
                "persona": persona,
                "content": text,
                "status": "answered",
            }
        )
        rows.append(
            {
                "channel": channel,
                "role": "assistant",
                "author": persona,
                "persona": persona,
                "content": f"Noted: {text}",
                "status": "complete",
                "source": "reply",
            }
        )
    with app.store.write() as conn:
        app.store.messages.add_many(conn, rows)


def replies(runtime: Runtime, channel: str, turns: int, batch: int = 10) -> tuple[list[float], int]:
    """CPU seconds per reply of ``turns`` messages answered one after another (per batch); the
    history messages the last prompt carried."""
    per_reply: list[float] = []
    carried = 0
    for start in range(0, turns, batch):
        cpu = time.process_time()
        for i in range(start, start + batch):
            persona = "alpha" if channel == "solo" else None
            accepted = runtime.submit(
                persona,
                channel,
                f"user{i % 3}",
                f"{TEXTS[i % len(TEXTS)]} (turn {i})",
                disable_memory=True,
                sink=_waiter.put,
            )
            event = _waiter.wait(accepted.message_id)
            carried = int(event.budget.get("history_messages", 0)) if isinstance(event, Done) else -1
        per_reply.append((time.process_time() - cpu) / batch)
    return per_reply, carried


class _Waiter:
    """Collects Done/Error events by the message they answer."""

    def __init__(self) -> None:
        self._done: dict[int, Done | Error] = {}
        self._cond = threading.Condition()

    def put(self, event: Any) -> None:
        if isinstance(event, Done | Error):
            with self._cond:
                key = event.user_message_id or 0
                self._done[key] = event
                self._cond.notify_all()

    def wait(self, message_id: int) -> Done | Error:
        with self._cond:
            self._cond.wait_for(lambda: message_id in self._done, 120)
            return self._done.pop(message_id)


_waiter = _Waiter()


class SlowModel(LitellmChat):
    """The offline model, each call ``delay`` seconds longer (a model's time), the time counted; its
    reply ends by calling on the other of alpha and beta (so a chain runs one reply at a time)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.spent = 0.0

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        time.sleep(self.delay)
        try:
            turn = super().stream(*args, **kwargs)
            on_text = args[3] if len(args) > 3 else kwargs["on_text"]
            on_text(" @beta?" if args[0].persona == "alpha" else " @alpha?")
            return turn
        finally:
            self.spent += time.perf_counter() - started


def chain(app: App, model_ms: float, runs: int) -> None:
    model = SlowModel(model_ms / 1000)
    runtime = Runtime(app, model)
    walls, rest = [], []
    try:
        for run in range(runs):
            model.spent = 0.0
            with app.store.read() as conn:
                before = len([m for m in app.store.messages.after(conn, "chain", 0, 10_000) if m.role == "assistant"])
            started = time.perf_counter()
            runtime.submit(None, "chain", "alice", f"@alpha what do you think? (run {run})", disable_memory=True)

            def count(before: int = before) -> int:
                with app.store.read() as conn:
                    found = app.store.messages.after(conn, "chain", 0, 10_000)
                    pending = app.store.messages.with_status(conn, "pending")
                return len([m for m in found if m.role == "assistant"]) - before if not pending else -1

            while count() < LINKS:
                time.sleep(0.002)
            wall = time.perf_counter() - started
            walls.append(wall * 1000)
            rest.append((wall - model.spent) * 1000 / LINKS)
        print(f"chain of {LINKS} replies (2 persona-to-persona), model +{model_ms:g} ms per call, {runs} runs:")
        print(
            f"  wall p50 {statistics.median(walls):.1f} ms (the model's calls: {LINKS * model_ms:.0f} ms + their work)"
        )
        print(f"  beyond the model, per reply: p50 {statistics.median(rest):.1f} ms, max {max(rest):.1f} ms")
    finally:
        runtime.stop(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=2000, help="exchanges stored in each channel first")
    parser.add_argument("--turns", type=int, default=100, help="measured replies per channel")
    parser.add_argument("--model-ms", type=float, default=50.0, help="the stand-in model's time per call")
    parser.add_argument("--chains", type=int, default=10, help="chains measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-bench-rooms-") as tmp:
        config = load_config(write_home(Path(tmp)), environ={})
        configure(config.logging)
        app = App(config)
        try:
            fill(app, "solo", ("alpha",), args.history)
            fill(app, "room", TRIO, args.history)
            runtime = Runtime(app)
            try:
                for channel in ("solo", "room"):
                    replies(runtime, channel, 10)  # warm: actors, the history cache
                for channel in ("solo", "room"):
                    per, carried = replies(runtime, channel, args.turns)
                    print(
                        f"{channel:5} ({'1 persona' if channel == 'solo' else '3 personas, rotate'}): "
                        f"CPU per reply p50 {statistics.median(per) * 1000:.2f} ms, "
                        f"mean {statistics.fmean(per) * 1000:.2f} ms; prompt carried {carried} history messages"
                    )
            finally:
                runtime.stop(5)
            chain(app, args.model_ms, args.chains)
        finally:
            app.close()


if __name__ == "__main__":
    main()
