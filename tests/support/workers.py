"""Driving a daemon with worker processes over HTTP and reading back what it answered (tests of
workers, drain and metrics)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from agentd.app import App
from agentd.config import load_config
from agentd.runtime.scaleout.workers import shard_of
from tests.support import wait_for

#: A home with two worker processes and a short grace at shutdown.
WORKERS = "[runtime]\nworkers = 2\n[daemon]\nshutdown_grace_seconds = 5\n"


def channels_of_both_workers(n: int) -> list[str]:
    """``n`` channel names, half of them answered by each of two workers."""
    found: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in found.values()) < n // 2:
        name = f"dm-room{i}"
        found[shard_of(name, 2)].append(name)
        i += 1
    return found[0][: n // 2] + found[1][: n - n // 2]


def stored_rows(home: Path, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The rows ``sql`` reads from the store of the home ``home`` (a daemon may be running on it)."""
    app = App(load_config(home, environ={}))
    try:
        with app.store.read() as conn:
            return list(conn.execute(sa.text(sql), params or {}).fetchall())
    finally:
        app.close()


def replies_of(home: Path) -> dict[int, list[tuple[int, str]]]:
    """user message id -> its complete replies ``(id, status)``."""
    rows = stored_rows(
        home, "SELECT reply_to, id, status FROM messages WHERE role = 'assistant' AND status = 'complete'"
    )
    found: dict[int, list[tuple[int, str]]] = {}
    for reply_to, mid, status in rows:
        found.setdefault(int(reply_to), []).append((int(mid), str(status)))
    return found


def post_all(url: str, channels: list[str], per_channel: int) -> list[tuple[str, int]]:
    """Post ``per_channel`` messages to each channel from one thread per channel; ``(channel, id)`` each."""
    accepted: list[tuple[str, int]] = []
    lock = threading.Lock()

    def post(channel: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for i in range(per_channel):
                answer = client.post(
                    f"/v1/channels/{channel}/messages",
                    json={"user": "ann", "text": f"note {i} about rust in {channel}"},
                )
                assert answer.status_code == 202, answer.text
                with lock:
                    accepted.append((channel, int(answer.json()["id"])))

    threads = [threading.Thread(target=post, args=(c,)) for c in channels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return accepted


def wait_answered(home: Path, ids: list[int], timeout: float = 120) -> dict[int, list[tuple[int, str]]]:
    found: dict[int, list[tuple[int, str]]] = {}

    def all_answered() -> bool:
        nonlocal found
        found = replies_of(home)
        return all(i in found for i in ids)

    wait_for(all_answered, timeout, "every accepted message to be answered")
    return found
