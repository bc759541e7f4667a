"""A daemon (``agentd serve``) on one of the three dispatchers, for the dispatcher contract suite
(tests/test_dispatcher_contract.py; the ``dispatcher`` fixture in conftest.py)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support import wait_for
from tests.support.fakeopenai import FakeOpenAI, fake_persona
from tests.support.homes import write_home
from tests.support.serve import Serve
from tests.support.workers import replies_of, stored_rows

#: The dispatchers, and what a home needs to get each: local actors and the worker pool on SQLite,
#: the cluster router on PostgreSQL (with leases short enough for a takeover within a test).
DISPATCHERS: dict[str, str] = {
    "actors": "[runtime]\nworkers = 0\n",
    "workers": "[runtime]\nworkers = 2\n",
    "cluster": "[cluster]\nheartbeat_seconds = 0.5\nlease_seconds = 4\n",
}
BASE = '[embedding]\nprovider = "none"\n[daemon]\nshutdown_grace_seconds = 5\n'
#: Words of a slow message: the fake model echoes one every ``SLOW_DELAY`` seconds (about 5 s a reply).
SLOW_WORDS = 24
SLOW_DELAY = 0.2


@dataclass
class Dispatch:
    """A daemon (``agentd serve``) on one dispatcher, started by the test with :meth:`start`."""

    kind: str
    root: Path
    fake: FakeOpenAI
    database_url: str
    daemons: list[Serve] = field(default_factory=list)
    home: Path | None = None

    def start(self, config: str = "", daemon: str = "", personas: dict[str, str] | None = None) -> Serve:
        """Write the home (``config``: tables added to the dispatcher's own settings; ``daemon``: lines of
        its ``[daemon]`` table; ``personas``: persona files by name, beside or instead of ``fake``, the
        fake model's persona in ``dm-*``) and start a daemon on it."""
        text = BASE + daemon + DISPATCHERS[self.kind] + config
        files = {"fake": fake_persona(self.fake.url, channels='["dm-*"]', skills="[]"), **(personas or {})}
        self.home = write_home(self.root / "home", text, files, self.database_url)
        return self.restart()

    def restart(self) -> Serve:
        """Another daemon on the same home and store (the previous one stopped or crashed)."""
        assert self.home is not None, "start() first"
        self.daemons.append(Serve(self.home))
        return self.daemons[-1]

    @property
    def url(self) -> str:
        """The newest daemon's base URL."""
        return self.daemons[-1].url

    def post(self, channel: str, text: str, user: str = "ann", persona: str | None = "fake") -> httpx.Response:
        """``POST /v1/channels/{channel}/messages`` to the newest daemon (``persona`` ``None``: the
        channel's, or in a room the room's rules, choose who answers)."""
        body = {"user": user, "text": text} | ({} if persona is None else {"persona": persona})
        return httpx.post(f"{self.url}/v1/channels/{channel}/messages", json=body, timeout=30)

    def accept(self, channels: list[str], per_channel: int, words: int = 3) -> list[int]:
        """Post ``per_channel`` messages to each channel, round-robin; their ids (each must be accepted)."""
        ids: list[int] = []
        for i in range(per_channel):
            for channel in channels:
                answer = self.post(channel, " ".join(f"w{i}{n}" for n in range(words)))
                assert answer.status_code == 202, answer.text
                ids.append(int(answer.json()["id"]))
        return ids

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """``GET /v1/channels/{channel}/messages`` of the newest daemon: the channel's messages, oldest first."""
        answer = httpx.get(f"{self.url}/v1/channels/{channel}/messages", params={"limit": 1000}, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()["messages"]  # type: ignore[no-any-return]

    def replies(self) -> dict[int, list[tuple[int, str]]]:
        """User message id -> its complete replies ``(id, status)``, read from the store."""
        assert self.home is not None
        return replies_of(self.home)

    def stored(self, channel: str) -> list[dict[str, Any]]:
        """Every message of ``channel`` as stored (people's, the personas' calls on each other (role
        ``trigger``), replies), oldest first, read from the store: what the daemon did, whichever ran it."""
        assert self.home is not None, "start() first"
        rows = stored_rows(
            self.home,
            "SELECT id, role, persona, author, content, source, status, reply_to FROM messages "
            "WHERE channel = :channel ORDER BY id",
            {"channel": channel},
        )
        return [dict(row._mapping) for row in rows]

    def wait_answered(self, ids: list[int], timeout: float = 120) -> dict[int, list[tuple[int, str]]]:
        """Wait until every message of ``ids`` has a complete reply; the replies."""
        found: dict[int, list[tuple[int, str]]] = {}

        def answered() -> bool:
            nonlocal found
            found = self.replies()
            return all(i in found for i in ids)

        wait_for(answered, timeout, "every accepted message to be answered")
        return found

    def crash(self) -> None:
        """SIGKILL the process that runs the turns: a worker of the pool (the daemon starts it again), or
        the daemon itself (then another daemon starts on the same store, as a supervisor would)."""
        if self.kind == "workers":
            for worker in httpx.get(f"{self.url}/healthz", timeout=30).json()["workers"]:
                os.kill(worker["pid"], signal.SIGKILL)
            return
        self.daemons[-1].proc.send_signal(signal.SIGKILL)
        self.daemons[-1].proc.wait(30)
        self.restart()

    def stop(self) -> int:
        """SIGTERM the newest daemon; its exit status (it drains first)."""
        daemon = self.daemons[-1]
        daemon.proc.send_signal(signal.SIGTERM)
        return daemon.proc.wait(60)

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop()


def assert_in_order_once(replies: dict[int, list[tuple[int, str]]], channels: dict[int, str]) -> None:
    """Each message of ``channels`` (id -> channel) has exactly one complete reply, and within a channel
    the replies come in the order of the messages."""
    assert all(len(replies[mid]) == 1 for mid in channels), {m: replies.get(m) for m in channels}
    for channel in set(channels.values()):
        asked = sorted(mid for mid, c in channels.items() if c == channel)
        answered = [replies[mid][0][0] for mid in asked]
        assert answered == sorted(answered), (channel, asked, answered)


def by_channel(channels: list[str], ids: list[int]) -> dict[int, str]:
    """The channel of each id :meth:`Dispatch.accept` returned (posted round-robin)."""
    return {mid: channels[i % len(channels)] for i, mid in enumerate(ids)}
