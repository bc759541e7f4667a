"""Chaos: kill the daemon while it is busy, restart it, and count what was lost.

Each run starts ``agentd serve`` on a fresh port over one database, posts
messages to several channels from a few threads, and at a random moment sends
the daemon SIGKILL (or SIGTERM). The daemon is started again, answers what was
left pending, and is stopped with SIGTERM. Then the database is read:

* accepted   messages the daemon answered 202 for, in this run
* missing    accepted messages that are not in the store
* unanswered accepted messages that are not ``answered`` once the restarted
             daemon is idle
* duplicated accepted messages with more than one complete reply
* integrity  ``PRAGMA integrity_check``

Target: 0 / 0 / 0 / ok for every run. The personas use the offline model (no
key, no network) unless ``--model`` names another.

    python bench/chaos.py --kills 6 --terms 3 --messages 200 --channels 7
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import httpx

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    """One kill: what was accepted, and what the store says afterwards."""

    signal: str
    accepted: list[int] = field(default_factory=list)
    refused: int = 0
    missing: int = 0
    unanswered: int = 0
    duplicated: int = 0
    integrity: str = ""
    stop_seconds: float = 0.0
    recover_seconds: float = 0.0


def write_home(root: Path, model: str, channels: int, embedding: str) -> Path:
    (root / "personas").mkdir(parents=True)
    (root / "personas" / "chaos.toml").write_text(
        f'name = "chaos"\nmodel = "{model}"\nmax_reply_tokens = 128\nchannels = ["chaos-*"]\n'
        'skills = []\nsystem_prompt = "You are chaos. Answer briefly."\n'
    )
    config = root / "agentd.toml"
    config.write_text(
        f'[database]\nurl = "sqlite:///chaos.db"\n[logging]\nlevel = "warning"\n[embedding]\nprovider = "{embedding}"\n'
        # Admission control off: this run counts what a crash loses, not what overload refuses.
        "[daemon]\nmax_pending = 1000000000\nmax_pending_per_channel = 1000000000\n"
    )
    return config


class Daemon:
    """``agentd serve --port 0`` in a subprocess."""

    def __init__(self, config: Path) -> None:
        exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        self.proc = subprocess.Popen(
            [exe, "--config", str(config), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if "listening on" not in line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise SystemExit(f"agentd serve did not start: {line}{err}")
        self.url = line.split("listening on ")[1].split()[0]
        # Drain the pipes so a chatty daemon never blocks on a full one.
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=lambda s=stream: [None for _ in s], daemon=True).start()

    def stop(self, sig: signal.Signals, timeout: float = 60) -> float:
        start = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            print(f"  (the daemon did not stop within {timeout:g} s of {sig.name}: killed)", file=sys.stderr)
        return time.monotonic() - start


def post_until_stopped(url: str, channels: int, total: int, run: Run, stop: threading.Event, seed: int) -> None:
    """Post up to ``total`` messages from a few threads until ``stop``; record the accepted ids."""
    lock = threading.Lock()
    counter = iter(range(total))

    def worker(index: int) -> None:
        rng = random.Random(seed * 100 + index)
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
                channel = f"chaos-{rng.randrange(channels)}"
                try:
                    answer = client.post(
                        f"/v1/channels/{channel}/messages", json={"user": f"u{index}", "text": f"message {n}"}
                    )
                except httpx.TransportError:
                    with lock:
                        run.refused += 1
                    return  # the daemon is gone
                with lock:
                    if answer.status_code == 202:
                        run.accepted.append(int(answer.json()["id"]))
                    else:
                        run.refused += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def settle(url: str, timeout: float) -> None:
    """Wait until the daemon has no turn in flight (its actors' queues are empty)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=10) as client:
        while time.monotonic() < deadline:
            health = client.get("/healthz").json()
            if not any(a.get("inflight") for a in health.get("actors", [])):
                return
            time.sleep(0.2)


def audit(config: Path, run: Run) -> None:
    """Read the stopped daemon's database: what happened to each accepted message."""
    sys.path.insert(0, str(ROOT))
    from agentd.config import load_config
    from agentd.store import Store

    cfg = load_config(config, environ={})
    store = Store.open(cfg.database_url)
    try:
        with store.read() as conn:
            ids = run.accepted
            found = {
                row[0]: row[1]
                for start in range(0, len(ids), 500)
                for row in conn.exec_driver_sql(
                    f"SELECT id, status FROM messages WHERE id IN ({','.join('?' * len(ids[start : start + 500]))})",
                    tuple(ids[start : start + 500]),
                )
            }
            replies: dict[int, int] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                for reply_to, count in conn.exec_driver_sql(
                    "SELECT reply_to, count(*) FROM messages WHERE role = 'assistant' AND status = 'complete' "
                    f"AND reply_to IN ({','.join('?' * len(chunk))}) GROUP BY reply_to",
                    tuple(chunk),
                ):
                    replies[reply_to] = count
            run.integrity = str(conn.exec_driver_sql("PRAGMA integrity_check").scalar_one())
    finally:
        store.close()
    run.missing = sum(1 for i in ids if i not in found)
    run.unanswered = sum(1 for i in ids if i in found and (found[i] != "answered" or replies.get(i, 0) == 0))
    run.duplicated = sum(1 for i in ids if replies.get(i, 0) > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5, help="runs ended by SIGKILL")
    parser.add_argument("--terms", type=int, default=2, help="runs ended by SIGTERM")
    parser.add_argument("--messages", type=int, default=200, help="messages posted per run (at most)")
    parser.add_argument("--channels", type=int, default=7)
    parser.add_argument("--model", default="offline")
    parser.add_argument("--embedding", default="none", choices=("none", "local"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the home directory")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="agentd-chaos-"))
    config = write_home(home, args.model, args.channels, args.embedding)
    signals = [signal.SIGKILL] * args.kills + [signal.SIGTERM] * args.terms
    rng.shuffle(signals)
    runs: list[Run] = []
    print(f"chaos: {len(signals)} runs, up to {args.messages} messages each over {args.channels} channels")
    try:
        for number, sig in enumerate(signals, start=1):
            run = Run(sig.name)
            daemon = Daemon(config)
            stop = threading.Event()
            poster = threading.Thread(
                target=post_until_stopped,
                args=(daemon.url, args.channels, args.messages, run, stop, args.seed * 1000 + number),
                daemon=True,
            )
            poster.start()
            # The moment of the kill: once a random number of messages were accepted, plus a
            # random fraction of a second (so it falls mid-turn, mid-commit, mid-stream).
            target = rng.randint(args.messages // 10, args.messages * 3 // 4)
            deadline = time.monotonic() + 120
            while len(run.accepted) < target and poster.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
            run.stop_seconds = daemon.stop(sig)
            stop.set()
            poster.join(60)
            start = time.monotonic()
            again = Daemon(config)  # answers what was left pending
            settle(again.url, 300)
            run.recover_seconds = time.monotonic() - start
            again.stop(signal.SIGTERM)
            audit(config, run)
            runs.append(run)
            print(
                f"run {number:2d} {run.signal:7s} accepted {len(run.accepted):4d}  missing {run.missing}  "
                f"unanswered {run.unanswered}  duplicated {run.duplicated}  integrity {run.integrity}  "
                f"(stopped in {run.stop_seconds:.2f} s, caught up in {run.recover_seconds:.1f} s)",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"home kept: {home}")
    print()
    print(f"{'run':>3} {'signal':7} {'accepted':>8} {'missing':>7} {'unanswered':>10} {'duplicated':>10} integrity")
    for number, run in enumerate(runs, start=1):
        print(
            f"{number:>3} {run.signal:7} {len(run.accepted):>8} {run.missing:>7} {run.unanswered:>10} "
            f"{run.duplicated:>10} {run.integrity}"
        )
    total = [
        sum(len(r.accepted) for r in runs),
        *(sum(getattr(r, k) for r in runs) for k in ("missing", "unanswered", "duplicated")),
    ]
    ok = all(r.integrity == "ok" for r in runs)
    print(f"{'all':>3} {'':7} {total[0]:>8} {total[1]:>7} {total[2]:>10} {total[3]:>10} {'ok' if ok else 'NOT OK'}")
    print(f"median time to catch up after restart: {median(r.recover_seconds for r in runs):.1f} s")
    bad = total[1] or total[2] or total[3] or not ok
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
