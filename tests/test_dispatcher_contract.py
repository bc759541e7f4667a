"""The dispatcher contract: one set of behaviours, run against every way agentd runs turns.

A daemon chooses its dispatcher once (agentd/runtime/runtime.py): local actors in its own
process (SQLite, ``[runtime] workers = 0``), a pool of worker processes (SQLite, ``workers``
above 0, what ``agentd serve`` runs by default on two cores or more), or the cluster router
(PostgreSQL, which several daemons may share). The ``dispatcher`` fixture is parametrised over
the three (:data:`DISPATCHERS`), the way pykka runs one suite over every actor runtime, so each
behaviour below runs once per dispatcher, against ``agentd serve`` as installed, in a subprocess.

How to add a behaviour (rooms, schedules, approvals, ...): write a test here that takes
``dispatcher: Dispatch`` (and ``fake_openai`` to script the model), start the daemon with
``dispatcher.start(config)`` (extra TOML: the dispatcher's own settings are added), post with
:meth:`Dispatch.post`, read back with :meth:`Dispatch.replies` / :meth:`Dispatch.wait_answered`,
and use :meth:`Dispatch.crash` (SIGKILL the process that runs the turns, and for a daemon that
ran them itself, start another on the same store), :meth:`Dispatch.stop` (SIGTERM and its exit
status) and :meth:`Dispatch.restart`. Assert only what must hold for every dispatcher; what is one
dispatcher's own mechanics stays in its module (test_workers.py, test_cluster.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import follow, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.support.homes import write_home
from tests.support.pgserver import PostgresDatabases
from tests.support.serve import Serve
from tests.support.workers import channels_of_both_workers, replies_of

pytestmark = pytest.mark.slow

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

    def start(self, config: str = "", daemon: str = "") -> Serve:
        """Write the home (``config``: tables added to the dispatcher's own settings; ``daemon``: lines of
        its ``[daemon]`` table) and start a daemon on it."""
        text = BASE + daemon + DISPATCHERS[self.kind] + config
        personas = {"fake": fake_persona(self.fake.url, channels='["dm-*"]', skills="[]")}
        self.home = write_home(self.root / "home", text, personas, self.database_url)
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

    def post(self, channel: str, text: str, user: str = "ann") -> httpx.Response:
        """``POST /v1/channels/{channel}/messages`` to the newest daemon."""
        body = {"persona": "fake", "user": user, "text": text}
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

    def replies(self) -> dict[int, list[tuple[int, str]]]:
        """User message id -> its complete replies ``(id, status)``, read from the store."""
        assert self.home is not None
        return replies_of(self.home)

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


@pytest.fixture(params=list(DISPATCHERS))
def dispatcher(request: pytest.FixtureRequest, tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Dispatch]:
    """One daemon per dispatcher of :data:`DISPATCHERS` (not started: the test calls ``start``)."""
    kind = str(request.param)
    url = "sqlite:///agentd.db"
    if kind == "cluster":
        databases: PostgresDatabases = request.getfixturevalue("postgres")
        url = databases.fresh()
    dispatch = Dispatch(kind, tmp_path, fake_openai, url)
    yield dispatch
    dispatch.close()


def assert_in_order_once(replies: dict[int, list[tuple[int, str]]], channels: dict[int, str]) -> None:
    """Each message of ``channels`` (id -> channel) has exactly one complete reply, and within a channel
    the replies come in the order of the messages."""
    assert all(len(replies[mid]) == 1 for mid in channels), {m: replies.get(m) for m in channels}
    for channel in set(channels.values()):
        asked = sorted(mid for mid, c in channels.items() if c == channel)
        answered = [replies[mid][0][0] for mid in asked]
        assert answered == sorted(answered), (channel, asked, answered)


def _by_channel(channels: list[str], ids: list[int]) -> dict[int, str]:
    """The channel of each id :meth:`Dispatch.accept` returned (posted round-robin)."""
    return {mid: channels[i % len(channels)] for i, mid in enumerate(ids)}


def test_messages_of_a_channel_are_answered_once_in_order(dispatcher: Dispatch) -> None:
    dispatcher.start()
    channels = channels_of_both_workers(4)
    ids = dispatcher.accept(channels, 4)
    assert_in_order_once(dispatcher.wait_answered(ids), _by_channel(channels, ids))


def test_after_a_crash_of_the_process_running_turns_every_accepted_message_is_answered_once(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start()
    fake_openai.chat_delay_per_token = SLOW_DELAY
    channels = channels_of_both_workers(2)
    ids = dispatcher.accept(channels, 3, words=SLOW_WORDS)
    wait_for(lambda: fake_openai.streaming.is_set(), 60, "a reply streaming")
    dispatcher.crash()
    fake_openai.chat_delay_per_token = 0.0
    assert_in_order_once(dispatcher.wait_answered(ids), _by_channel(channels, ids))


def test_sigterm_drains_starts_no_queued_turn_and_the_next_daemon_answers_the_rest_once(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start()
    fake_openai.chat_delay_per_token = SLOW_DELAY
    channels = channels_of_both_workers(2)
    ids = dispatcher.accept(channels, 3, words=SLOW_WORDS)
    wait_for(lambda: len(fake_openai.chat_requests()) >= 2, 60, "a turn running in each channel")
    assert dispatcher.stop() == 0, "".join(dispatcher.daemons[-1].stderr)
    assert len(fake_openai.chat_requests()) == 2  # the running turns finished or were cut; no queued one started
    completed = len(dispatcher.replies())  # within the grace period, or cut (kept as interrupted)
    fake_openai.chat_delay_per_token = 0.0
    dispatcher.restart()
    assert_in_order_once(dispatcher.wait_answered(ids), _by_channel(channels, ids))
    # The next daemon asked the model once for each message not answered before.
    assert len(fake_openai.chat_requests()) == 2 + len(ids) - completed


def test_past_the_channels_bound_a_post_is_refused_with_429_and_nothing_is_stored(
    dispatcher: Dispatch, fake_openai: FakeOpenAI
) -> None:
    dispatcher.start(daemon="max_pending = 10\nmax_pending_per_channel = 2\n")
    fake_openai.queue(Turn(hang=True, text="held"))
    first = dispatcher.post("dm-a", "one")
    assert first.status_code == 202, first.text
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    assert dispatcher.post("dm-a", "two").status_code == 202
    refused = dispatcher.post("dm-a", "three")
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "overloaded"
    assert int(refused.headers["retry-after"]) >= 1
    stored = httpx.get(f"{dispatcher.url}/v1/channels/dm-a/messages", timeout=30).json()["messages"]
    assert [m["content"] for m in stored if m["role"] == "user"] == ["one", "two"]
    fake_openai.release()
    dispatcher.wait_answered([int(first.json()["id"])])


def test_a_follower_sees_the_message_the_turns_events_and_the_reply_in_order(dispatcher: Dispatch) -> None:
    dispatcher.start()

    def done(events: list[Any]) -> bool:
        return any(e.event == "done" for e in events) and sum(e.event == "message" for e in events) >= 2

    with httpx.Client(base_url=dispatcher.url, timeout=60) as client:
        follower, thread = follow(client, "dm-feed", until=done)
        wait_for(follower.ready.is_set, 30, "the follower to connect")
        posted = dispatcher.post("dm-feed", "hello there")
        assert posted.status_code == 202
        thread.join(60)
    events = follower.snapshot()
    kinds = [e.event for e in events]
    assert "done" in kinds, kinds
    messages = [e for e in events if e.event == "message"]
    assert [m.data["role"] for m in messages] == ["user", "assistant"]
    assert messages[0].data["id"] == posted.json()["id"]
    assert messages[1].data["reply_to"] == posted.json()["id"]
    assert kinds.index("message") < kinds.index("done")  # the user message before its turn's end
