"""The WAL's size while a daemon answers a thousand messages: bounded, not growing with them.

    python bench/wal.py [--messages 1000] [--channels 8] [--inflight 32] [--checkpoint-seconds 30]

Starts a daemon in this process on a loopback port (port 0) in a fresh temporary home, with
the ``buddy`` persona on the offline model (no network, no model time), posts ``--messages``
messages to ``POST /v1/channels/{c}/messages`` over ``--channels`` channels, at most
``--inflight`` unanswered at a time, and prints, every tenth of the run, how many were
answered, the size of ``agentd.db-wal`` and of ``agentd.db``; then the largest WAL seen, the
WAL at the end, and the database's size. ``--checkpoint-seconds 0`` turns the daemon's
checkpoints off ([database] checkpoint_seconds), to see what SQLite's own do alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.api.server import DaemonServer  # noqa: E402
from agentd.app import App  # noqa: E402
from agentd.config import load_config  # noqa: E402
from agentd.observe.log import configure  # noqa: E402

PERSONA = """name = "buddy"
model = "offline"
max_reply_tokens = 256
channels = ["bench-*"]
skills = ["remember", "recall"]
system_prompt = "You are buddy."
"""
LINE = "the depot moved the freight schedule to thursday and asked for the staffing plan "


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _mb(n: int) -> str:
    return f"{n / 1e6:8.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--checkpoint-seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-wal-") as tmp:
        home = Path(tmp)
        (home / "personas").mkdir()
        (home / "personas" / "buddy.toml").write_text(PERSONA)
        (home / "agentd.toml").write_text(
            '[database]\nurl = "sqlite:///agentd.db"\n'
            f"checkpoint_seconds = {args.checkpoint_seconds}\n"
            '[logging]\nlevel = "warning"\n[embedding]\nprovider = "none"\n'
        )
        config = load_config(home / "agentd.toml", environ=dict(os.environ))
        configure(config.logging)
        app = App(config)
        server = DaemonServer(app, "127.0.0.1", 0)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        db, wal = home / "agentd.db", home / "agentd.db-wal"
        print(f"{args.messages} messages over {args.channels} channels, checkpoint_seconds = {args.checkpoint_seconds}")
        print(f"{'answered':>9} {'seconds':>8} {'WAL':>11} {'database':>11}")
        largest, start = 0, time.monotonic()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            posted = answered = 0
            step = max(1, args.messages // 10)
            next_report = step
            while answered < args.messages:
                while posted < args.messages and posted - answered < args.inflight:
                    channel = f"bench-{posted % args.channels}"
                    r = client.post(
                        f"/v1/channels/{channel}/messages",
                        json={"user": f"u{posted % 50}", "text": f"{posted}: {LINE * 4}"},
                    )
                    if r.status_code == 429:
                        time.sleep(float(r.headers.get("Retry-After", "1")))
                        continue
                    r.raise_for_status()
                    posted += 1
                time.sleep(0.05)
                answered = _answered(app)
                largest = max(largest, _size(wal))
                if answered >= next_report:
                    print(f"{answered:>9} {time.monotonic() - start:>8.1f} {_mb(_size(wal))} {_mb(_size(db))}")
                    next_report += step
        server.request_stop()
        thread.join(60)
        print(f"largest WAL seen: {_mb(largest)}; WAL at the end: {_mb(_size(wal))}; database: {_mb(_size(db))}")


def _answered(app: App) -> int:
    """Replies stored so far."""
    import sqlalchemy as sa

    from agentd.store import schema

    m = schema.messages
    with app.store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(m.c.role == "assistant")).scalar_one())


if __name__ == "__main__":
    main()
