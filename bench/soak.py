"""A soak run of ``agentd serve``: a steady half of its capacity for a long time, and what drifts.

    python bench/soak.py --minutes 30            # capacity measured first, then half of it
    python bench/soak.py --minutes 3 --rate 4    # a given rate (posts per second), no measuring

Starts ``agentd serve`` as ``bench/daemon.py`` does (its helpers, imported: the same fresh
home, shipped ``buddy`` persona on the offline model, local embedder, seeded history and
memories). Without ``--rate`` it first measures the capacity: ``--clients`` closed loops, each
waiting for its reply before it posts again (``POST /v1/chat``), for ``--measure-seconds``; their
replies per second are the capacity (the daemon saturated, no backlog left behind). The soak
then offers ``--fraction`` (0.5) of it, on a fixed schedule, for ``--minutes``.

Sampled every ``--sample-seconds`` (60) while it runs: the memory of the daemon and its worker
processes (PSS: a page they share counts once; and RSS), their open file descriptors, and the
database's size (the file, its WAL and shared memory). After the run, per minute of posting:
replies per second (replies stored in that minute), post→reply latency p50/p99 (of the messages
posted in that minute, from the POST leaving the client to the reply's ``created_at``).

The closing lines give the drift: memory and latency at the end of the warm-up
(``--warmup`` minutes, default 5, at most a third of the run) against the last minute, in per
cent, and the file descriptors' range after the warm-up (goal: memory and latency within
10 %, descriptors constant). Then lost (accepted, never answered) and duplicated (more than
one complete reply). The machine may be shared: the load average is printed with each sample.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon import (  # noqa: E402
    QUESTIONS,
    Daemon,
    Phase,
    descendants,
    drive,
    fill,
    loadavg,
    pct,
    replies,
    seed_cached,
    settle,
    started,
    write_home,
)

#: Seconds uvicorn keeps an idle connection open after a response (its ``timeout_keep_alive``).
KEEP_ALIVE_S = 5.0


@dataclass
class Sample:
    """The daemon's resources at one moment of the soak."""

    minute: float
    pss_mb: float
    rss_mb: float
    fds: int
    db_mb: float
    load: str


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_fds(pid: int) -> int:
    """Open file descriptors of process ``pid`` (0 when it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def db_mb(config: Path) -> float:
    """The database's size: the SQLite file, its WAL and its shared memory, in MB."""
    db = config.parent / "bench.db"
    paths = (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))
    return sum(p.stat().st_size for p in paths if p.exists()) / 1e6


def sample(daemon: Daemon, config: Path, minute: float) -> Sample:
    """The daemon's and its processes' memory and descriptors, and the database's size, now."""
    pids = (daemon.proc.pid, *descendants(daemon.proc.pid))
    return Sample(
        minute,
        daemon.memory_mb(),
        sum(rss_mb(p) for p in pids),
        sum(open_fds(p) for p in pids),
        db_mb(config),
        loadavg(),
    )


def measure_capacity(url: str, clients: int, channels: list[str], seconds: float) -> float:
    """Replies per second of ``clients`` closed loops that each wait for their reply before the next
    post (``POST /v1/chat``, read to its end): the daemon saturated, and no backlog left behind."""
    finished: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=url, timeout=300) as http:
            while time.monotonic() < deadline:
                channel = channels[index % len(channels)]
                body = {
                    "persona": "buddy",
                    "channel": channel,
                    "user": f"u{index % 7}",
                    "message": fill(rng.choice(QUESTIONS), rng),
                }
                with http.stream("POST", "/v1/chat", json=body) as response:
                    for _line in response.iter_lines():
                        pass
                if response.status_code == 200:
                    with lock:
                        finished.append(time.monotonic())

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counted = sum(1 for t in finished if t <= deadline)
    if not counted:
        raise SystemExit("no reply while measuring the capacity: see the daemon's log")
    return counted / seconds


def soak(
    daemon: Daemon, config: Path, args: argparse.Namespace, rate: float, channels: list[str]
) -> tuple[Phase, list[Sample]]:
    """Offer ``rate`` posts per second for ``args.minutes``, sampling the daemon every ``args.sample_seconds``."""
    phase = Phase("soak", args.minutes * 60)
    seconds = args.minutes * 60
    # At a low rate, fewer clients: each posts at least every KEEP_ALIVE_S / 2 seconds, so none finds
    # its connection closed by the server's keep-alive timeout (drive counts that post refused).
    clients = max(1, min(args.clients, int(rate * KEEP_ALIVE_S / 2)))
    poster = threading.Thread(
        target=drive, args=(daemon.url, phase, clients, channels, seconds, {}, args.seed, rate), daemon=True
    )
    begin = time.monotonic()
    samples = [sample(daemon, config, 0.0)]
    poster.start()
    while True:
        poster.join(max(0.0, begin + len(samples) * args.sample_seconds - time.monotonic()))
        if not poster.is_alive() and time.monotonic() - begin - samples[-1].minute * 60 < args.sample_seconds / 10:
            break  # posting ended just after a sample: that one is its end
        s = sample(daemon, config, (time.monotonic() - begin) / 60)
        samples.append(s)
        print(
            f"  {s.minute:5.1f} min  accepted {len(phase.sent):6d}  PSS {s.pss_mb:6.0f} MB  RSS {s.rss_mb:6.0f} MB"
            f"  fds {s.fds:4d}  db {s.db_mb:7.1f} MB  load {s.load}",
            file=sys.stderr,
            flush=True,
        )
        if not poster.is_alive():  # posting is over: the last sample is its end
            break
    settle(daemon.url, 600)
    return phase, samples


def per_minute(phase: Phase, config: Path) -> tuple[list[tuple[int, float, float, float]], int, int]:
    """(minute, replies/s, p50 ms, p99 ms) per minute of posting; lost; duplicated."""
    answered, _statuses = replies(config, [s.message_id for s in phase.sent])
    minutes = max(1, int(round((phase.ended - phase.started) / 60)))
    rows = []
    for m in range(minutes):
        lo, hi = phase.started + 60 * m, phase.started + 60 * (m + 1)
        stored = sum(1 for _c, when in answered.values() if lo <= when.timestamp() < hi)
        waits = [
            (answered[s.message_id][1].timestamp() - s.sent) * 1000
            for s in phase.sent
            if lo <= s.sent < hi and s.message_id in answered
        ]
        rows.append((m + 1, stored / 60, pct(waits, 0.5), pct(waits, 0.99)))
    lost = sum(1 for s in phase.sent if s.message_id not in answered)
    duplicated = sum(1 for s in phase.sent if answered.get(s.message_id, (0,))[0] > 1)
    return rows, lost, duplicated


def drift(rows: list[tuple[int, float, float, float]], samples: list[Sample], warmup: float) -> list[str]:
    """The closing note: after the warm-up against the end."""

    def change(a: float, b: float) -> str:
        return f"{a:.0f} -> {b:.0f} ({(b - a) / a * 100:+.1f} %)" if a else f"{a:.0f} -> {b:.0f}"

    after = [s for s in samples if s.minute >= warmup] or samples[-1:]
    start_row = rows[min(len(rows) - 1, int(warmup))]
    end_row = rows[-1]
    fds = [s.fds for s in after]
    return [
        f"drift, minute {after[0].minute:.1f} (after {warmup:g} min of warm-up) against the end:",
        f"  memory PSS MB      {change(after[0].pss_mb, after[-1].pss_mb)}",
        f"  memory RSS MB      {change(after[0].rss_mb, after[-1].rss_mb)}",
        f"  reply p50 ms       {change(start_row[2], end_row[2])}   (minute {start_row[0]} vs {end_row[0]})",
        f"  reply p99 ms       {change(start_row[3], end_row[3])}",
        f"  replies/s          {start_row[1]:.2f} -> {end_row[1]:.2f}",
        f"  open fds           {fds[0]} -> {fds[-1]} (min {min(fds)}, max {max(fds)})",
        f"  database MB        {after[0].db_mb:.1f} -> {after[-1].db_mb:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of steady load (default 30)")
    parser.add_argument("--rate", type=float, default=0.0, help="posts per second (default: --fraction of capacity)")
    parser.add_argument("--fraction", type=float, default=0.5, help="share of the measured capacity offered")
    parser.add_argument("--measure-seconds", type=float, default=30.0, help="seconds of closed-loop posting")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--channels", type=int, default=20)
    parser.add_argument("--history", type=int, default=200, help="earlier messages in each channel")
    parser.add_argument("--memories", type=int, default=1000, help="global memories in reach")
    parser.add_argument("--sample-seconds", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=5.0, help="minutes before the drift is measured")
    parser.add_argument("--workers", default="auto", help='[runtime] workers ("auto", the default; 0: none)')
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (database, logs)")
    args = parser.parse_args()
    # A SIGTERM (or a kill of a background run) stops the daemon it started, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.minutes <= 0 or args.sample_seconds <= 0:
        parser.error("--minutes and --sample-seconds must be positive")
    warmup = min(args.warmup, args.minutes / 3)

    home = Path(tempfile.mkdtemp(prefix="agentd-soak-"))
    config = write_home(home, workers=args.workers)
    channels = [f"dm-soak-{i}" for i in range(args.channels)]
    print(
        f"bench/soak.py: {args.minutes:g} min, {args.clients} clients, {args.channels} channels; home {home}",
        file=sys.stderr,
    )
    try:
        seed_cached(config, channels, args.history, args.memories, random.Random(args.seed), None, args.seed)
        daemon = Daemon(config, home / "daemon.log")
        try:
            started(daemon.url, 120)
            capacity = 0.0
            rate = args.rate
            if rate <= 0:
                capacity = measure_capacity(daemon.url, args.clients, channels, args.measure_seconds)
                rate = capacity * args.fraction
                print(f"  capacity {capacity:.1f} replies/s; offering {rate:.1f} posts/s", file=sys.stderr)
            phase, samples = soak(daemon, config, args, rate, channels)
        finally:
            daemon.stop()
        rows, lost, duplicated = per_minute(phase, config)
    finally:
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(f"agentd serve, offline model, local embedder; cpus {os.cpu_count()}; workers {args.workers}")
    if capacity:
        print(
            f"capacity {capacity:.1f} replies/s (closed loops, {args.measure_seconds:g} s); offered {rate:.2f} posts/s"
        )
    else:
        print(f"offered {rate:.2f} posts/s (given)")
    print(f"accepted {len(phase.sent)}, refused {phase.refused}; lost {lost}, duplicated {duplicated}")
    print(" minute  replies/s  p50 ms  p99 ms   PSS MB   RSS MB  fds   db MB")
    for (minute, per_s, p50, p99), s in zip(rows, _at_minutes(samples, len(rows)), strict=True):
        figures = f"{per_s:9.2f}  {p50:6.0f}  {p99:6.0f}"
        print(f" {minute:6d}  {figures}  {s.pss_mb:7.0f}  {s.rss_mb:7.0f}  {s.fds:3d}  {s.db_mb:6.1f}")
    for line in drift(rows, samples, warmup):
        print(line)
    print(f"load average at the samples (1/5/15 min): first {samples[0].load}; last {samples[-1].load}")


def _at_minutes(samples: list[Sample], count: int) -> list[Sample]:
    """The sample nearest the end of each minute of posting."""
    return [min(samples, key=lambda s, m=m: abs(s.minute - (m + 1))) for m in range(count)]


if __name__ == "__main__":
    main()
