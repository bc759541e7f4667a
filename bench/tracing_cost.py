"""What OpenTelemetry tracing costs a reply, off and on.

    python bench/tracing_cost.py --seconds 15 --clients 8 --channels 10

(a) **Off**: the hooks a turn passes are counted (one turn answered in this process with tracing
on, its spans received by a local OTLP sink; every span is one hook, plus the ``traceparent``
carried with the message), each kind of hook is timed off (millions of calls), and their sum
per turn is printed as a share of the daemon's CPU per reply measured in (b) with tracing off.
The target: at most 0.5 %.

(b) **Off and on, in one run**: ``bench/daemon.py``'s runner (its home, seeding, daemon, load
and figures, imported, not copied) posts to ``agentd serve`` for ``--seconds`` twice over the
same seeded database, once without ``[telemetry]`` and once with ``otlp_endpoint`` set to a
local sink that decodes and counts what it receives; replies/s and the daemon's CPU per reply
for both. The machine may be shared: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import timeit
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import daemon as runner  # noqa: E402 - after the path is set


class Sink:
    """An OTLP/HTTP receiver on loopback that decodes each export and counts spans by name."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self.traces: dict[str, list[str]] = {}
        lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    for rs in request.resource_spans:
                        for ss in rs.scope_spans:
                            for s in ss.spans:
                                sink.names[s.name] += 1
                                sink.traces.setdefault(s.trace_id.hex(), []).append(s.name)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def hooks_of_one_turn(home: Path) -> Counter[str]:
    """The spans one buddy turn makes (answered in this process, tracing on, exported to a sink)."""
    from agentd.app import App
    from agentd.config import load_config
    from agentd.observe import tracing
    from agentd.runtime.actors.local import LocalActors
    from agentd.runtime.intake import Intake

    sink = Sink()
    config = load_config(runner.write_home(home, workers="0"), environ={})
    app = App(config)
    tracing.configure(config.telemetry.model_copy(update={"otlp_endpoint": sink.url}))
    intake = Intake(app, LocalActors)
    try:
        list(intake.chat("buddy", "dm-count", "u1", "warm up: what did we plan for the atlas review?"))
        sink.traces.clear()
        with tracing.span("one turn"):
            events = list(intake.chat("buddy", "dm-count", "u1", "what did we decide about the cobalt launch?"))
        assert type(events[-1]).__name__ == "Done", events[-1]
    finally:
        intake.stop(5)
        tracing.shutdown()
        app.close()
        sink.stop()
    (names,) = [names for names in sink.traces.values() if "one turn" in names]
    return Counter(n for n in names if n != "one turn")


def off_costs(number: int) -> dict[str, float]:
    """Seconds per call of each hook with tracing off."""
    from agentd.observe import tracing

    assert not tracing.enabled()

    @tracing.spanned("x")
    def decorated() -> None:
        pass

    def plain() -> None:
        pass

    def span_with_attributes() -> None:
        with tracing.span("turn", {"agentd.persona": "buddy", "agentd.channel": "dm-1"}, parent="") as s:
            s.set("gen_ai.usage.input_tokens", 1)
            s.set("gen_ai.usage.output_tokens", 1)

    def traced_call() -> None:
        tracing.traced(plain, "search", None if not tracing.enabled() else {})()

    cases = {
        "span": span_with_attributes,
        "spanned": decorated,
        "traced": traced_call,
        "inject": tracing.inject,
        "baseline": plain,
    }
    per_call = {name: min(timeit.repeat(fn, number=number, repeat=5)) / number for name, fn in cases.items()}
    base = per_call.pop("baseline")
    return {name: max(cost - base, 0.0) for name, cost in per_call.items()}


def load_phase(
    config: Path, sink: Sink | None, args: argparse.Namespace, channels: list[str]
) -> tuple[dict[str, Any], int]:
    """Post for ``--seconds`` to a fresh daemon over ``config``; its figures and the spans received."""
    text = config.read_text().split("[telemetry]")[0]
    if sink is not None:
        text += f'[telemetry]\notlp_endpoint = "{sink.url}"\n'
    config.write_text(text)
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "500"
    daemon = runner.Daemon(config, config.parent / f"daemon-{'on' if sink else 'off'}.log")
    try:
        runner.started(daemon.url, 120)
        runner.drive(daemon.url, runner.Phase("warm", 1), 2, channels, 2.0, {}, args.seed)
        runner.settle(daemon.url, 120)
        phase = runner.Phase("tracing on" if sink else "tracing off", args.seconds)
        before = daemon.cpu_seconds()
        runner.drive(daemon.url, phase, args.clients, channels, args.seconds, {}, args.seed)
        runner.settle(daemon.url, 600)
        phase.daemon_cpu = daemon.cpu_seconds() - before
    finally:
        daemon.stop()
    found = runner.replies(config, [s.message_id for s in phase.sent])
    figures = runner.report(phase, found, daemon.turn_lines())
    answered = len(found[0])
    figures["cpu_ms_per_reply"] = phase.daemon_cpu * 1000 / max(answered, 1)
    return figures, sum(sink.names.values()) if sink else 0


def _median(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each figure over the rounds (the lower middle one for an even count)."""
    return {
        key: sorted(float(r[key]) for r in rounds)[(len(rounds) - 1) // 2]
        for key in ("replies_per_s_to_last", "cpu_ms_per_reply")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds of posting per phase")
    parser.add_argument("--history", type=int, default=200, help="earlier messages in each channel")
    parser.add_argument("--memories", type=int, default=500, help="global memories in reach")
    parser.add_argument("--workers", default="0", help="[runtime] workers of the daemons (default 0)")
    parser.add_argument("--calls", type=int, default=200_000, help="calls per timing of an off hook")
    parser.add_argument(
        "--rounds", type=int, default=2, help="off/on pairs, alternated (the machine's load drifts); medians shown"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="agentd-tracing-cost-"))
    try:
        hooks = hooks_of_one_turn(home / "count")
        costs = off_costs(args.calls)
        config = runner.write_home(home / "load", workers=args.workers)
        channels = [f"dm-bench-{i}" for i in range(args.channels)]
        runner.seed(config, channels, args.history, args.memories, random.Random(args.seed))
        shutil.copy(config.parent / "bench.db", home / "seeded.db")
        load = runner.loadavg()
        offs, ons, exported = [], [], 0
        for _ in range(args.rounds):
            shutil.copy(home / "seeded.db", config.parent / "bench.db")
            offs.append(load_phase(config, None, args, channels)[0])
            shutil.copy(home / "seeded.db", config.parent / "bench.db")
            sink = Sink()
            try:
                on, spans_received = load_phase(config, sink, args, channels)
            finally:
                sink.stop()
            ons.append(on)
            exported += spans_received
        load += " -> " + runner.loadavg()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    off, on = _median(offs), _median(ons)

    spans = sum(hooks.values())
    # Each span is a span()/spanned()/traced() hook; plus the traceparent the intake injects.
    off_ns = (spans * max(costs["span"], costs["spanned"], costs["traced"]) + costs["inject"]) * 1e9
    print(f"bench/tracing_cost.py: {args.clients} clients, {args.channels} channels, {args.seconds:g} s per phase")
    print(f"(a) hooks one turn passes: {spans} spans ({', '.join(f'{n} x{c}' for n, c in sorted(hooks.items()))})")
    print(
        "    off, per call: "
        + ", ".join(f"{name} {cost * 1e9:.0f} ns" for name, cost in costs.items())
        + f"; per turn at most {off_ns / 1000:.2f} us"
    )
    print(
        f"    = {off_ns / 1e6 / off['cpu_ms_per_reply'] * 100:.4f} % of the daemon's CPU per reply "
        f"({off['cpu_ms_per_reply']:.2f} ms, tracing off; target <= 0.5 %)"
    )
    print(f"(b) same seeded database, a fresh daemon per phase, {args.rounds} off/on pair(s) alternated:")
    for name, rounds in (("off", offs), ("on", ons)):
        for r in rounds:
            print(
                f"    tracing {name:>3}: {r['replies_per_s_to_last']:7.1f} replies/s, "
                f"{r['cpu_ms_per_reply']:6.2f} ms daemon CPU per reply, {r['accepted']} accepted, "
                f"lost {r['lost']}, p50 post->reply {r['reply_p50_ms']:.0f} ms"
            )
    print(
        f"    medians on/off: replies/s x{on['replies_per_s_to_last'] / off['replies_per_s_to_last']:.3f}, "
        f"CPU per reply x{on['cpu_ms_per_reply'] / off['cpu_ms_per_reply']:.3f}; spans exported {exported}"
    )
    print(f"load average (1/5/15 min): {load}; shared machine, cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
