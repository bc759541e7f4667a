"""The store refuses a turn's reply: the outcome the client hears is the one the store holds,
``/healthz`` says why while it lasts, and the channel's later messages wait their turn.

The disk filling: the daemon's database lives on a small tmpfs that the test fills with a
file, as a disk fills up; deleting the file frees it again. Mounting needs root (as on
the project's machines); elsewhere that test is skipped, saying why. A write lock held
too long by another process (the same refusal, as the store sees it) needs nothing.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlean

from agentd.store.engine import create_engine
from tests.conftest import write_home
from tests.support import read_sse, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.support.serve import Serve

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

LONG_REPLY = " ".join(f"word{i}" for i in range(60))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/home0`` (the first daemon's home) on a 32 MB tmpfs."""
    mount = tmp_path / "home0"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; return it."""
    filler = directory / "filler"
    block = b"\0" * (1 << 16)
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def test_a_full_disk_mid_turn_never_tells_the_client_something_the_store_does_not_hold(
    small_disk, daemons, fake_openai
) -> None:
    d = daemons('[embedding]\nprovider = "none"\n')
    assert d.home.parent == small_disk  # the database is on the small disk
    fake_openai.chat_delay_per_token = 0.02
    fake_openai.queue(Turn(text=LONG_REPLY))
    body = {"persona": "fake", "channel": "general", "user": "alice", "message": "tell me a story"}
    events = []
    with d.client.stream("POST", "/v1/chat", json=body) as response:
        user_id = int(response.headers["X-Agentd-Message-Id"])
        for event in read_sse(response.iter_lines()):
            events.append(event)
            if event.event == "token_delta" and len(events) == 3:
                # The disk fills: the WAL is emptied first (an idle checkpoint, as SQLite does), so
                # the reply's commit needs new space.
                engine = create_engine(f"sqlite:///{small_disk / 'agentd.db'}")
                with engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                engine.dispose()
                filler = fill(small_disk)
    last = events[-1]
    assert last.event == "error", last.data
    assert last.data["code"] == "store_error", last.data
    assert "stays pending" in last.data["message"]
    health = d.client.get("/healthz").json()
    assert health["healthy"] is False
    assert health["status"] == "degraded"
    assert health["store"]["writable"] is False
    assert "full" in health["store"]["error"]
    # A message accepted while the disk is full: refused with 503, not stored, not answered later.
    refused = d.client.post("/v1/channels/general/messages", json={"persona": "fake", "user": "bob", "text": "hi"})
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "store_error"
    filler.unlink()  # space again
    # What the store holds is what the client was told: the message is pending, with no reply.
    with d.app.store.read() as conn:
        user = d.app.store.messages.get(conn, user_id)
        replies = d.app.store.messages.replies_to(conn, [user_id])
        assert [m.author for m in d.app.store.messages.after(conn, "general", 0)] == ["alice"]
    assert user is not None
    assert user.status == "pending"
    assert replies == {}
    later = d.chat("and now?")
    assert later[-1].event == "done"
    with d.app.store.read() as conn:  # settled before the later one was answered: not left pending
        user = d.app.store.messages.get(conn, user_id)
    assert user is not None
    assert user.status == "failed"
    wait_for(lambda: d.client.get("/healthz").json()["healthy"], 10, "healthz to say healthy again")
    assert d.client.get("/healthz").json()["store"] == {"writable": True}


@pytest.mark.parametrize("workers", [0, 2], ids=["actors", "workers"])
def test_a_reply_the_store_refuses_is_written_again_and_healthz_says_why_meanwhile(
    tmp_path: Path, fake_openai: FakeOpenAI, workers: int
) -> None:
    """Another process holds the database's write lock while a reply streams: the reply cannot
    be stored. ``/healthz`` says the store is not writable and why (the worker process's failed
    write too), the channel's next message is not answered before it, and once the lock is gone
    the reply is written again: both are answered, in order, and ``/healthz`` is healthy again."""
    home = _slow_reply_home(tmp_path, fake_openai, f"[runtime]\nworkers = {workers}\n")
    daemon = Serve(home)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            first = _post(client, "one two three four five six seven eight nine ten")
            second = _post(client, "and then")
            wait_for(fake_openai.streaming.is_set, 60, "the first reply to stream")
            with _write_lock(home):
                health = wait_for(lambda: _degraded(client), 30, "healthz to report the refused write")
                assert health["healthy"] is False
                assert health["store"]["writable"] is False
                assert "locked" in health["store"]["error"]
                assert _replies(client) == {}  # nothing answered meanwhile, the second not before the first
            replies = wait_for(lambda: len(_replies(client)) == 2 and _replies(client), 60, "both replies")
            assert replies[first] < replies[second]  # in order
            assert len(fake_openai.chat_requests()) == 2  # the reply was stored again, not asked again
            wait_for(lambda: client.get("/healthz").json()["healthy"], 30, "healthz to say healthy again")
            assert client.get("/healthz").json()["store"] == {"writable": True}
    finally:
        daemon.stop()


def _slow_reply_home(tmp_path: Path, fake_openai: FakeOpenAI, config: str = "") -> Path:
    """A home whose store gives up on a lock after 200 ms, and a model that streams slowly enough
    to take the lock while a reply is on its way."""
    home = write_home(tmp_path, '[embedding]\nprovider = "none"\n' + config, {"fake": fake_persona(fake_openai.url)})
    home.write_text(home.read_text().replace("[logging]", "busy_timeout_ms = 200\n[logging]", 1))
    fake_openai.chat_delay_per_token = 0.1
    return home


@contextmanager
def _write_lock(home: Path) -> Iterator[None]:
    """Another process holds the database's write lock meanwhile."""
    holder = sqlean.connect(str(home.parent / "agentd.db"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
    finally:
        holder.rollback()
        holder.close()


def _post(client: httpx.Client, text: str) -> int:
    answer = client.post("/v1/channels/general/messages", json={"persona": "fake", "user": "ann", "text": text})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["id"])


def _degraded(client: httpx.Client) -> dict[str, Any] | None:
    health: dict[str, Any] = client.get("/healthz").json()
    return health if health.get("status") == "degraded" else None


def _replies(client: httpx.Client) -> dict[int, int]:
    """user message id -> the id of its complete reply."""
    messages = client.get("/v1/channels/general/messages").json()["messages"]
    return {m["reply_to"]: m["id"] for m in messages if m["role"] == "assistant" and m["status"] == "complete"}


def test_a_reply_the_store_refuses_for_longer_ends_failed_before_a_later_message_is_answered(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """The write lock is held past the retries of a reply (about 16 s): the message cannot even be
    marked failed, so the channel's next message is not answered either (its turn does not start).
    Once the store takes writes, a third message finds both marked failed before it is answered:
    never a later message answered while an earlier one waits."""
    home = _slow_reply_home(tmp_path, fake_openai)
    daemon = Serve(home)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            first = _post(client, "one two three four five six seven eight nine ten")
            second = _post(client, "and then")
            wait_for(fake_openai.streaming.is_set, 60, "the first reply to stream")
            with _write_lock(home):
                wait_for(lambda: "turn_not_started" in "".join(daemon.stderr), 90, "the second turn to be held back")
            third = _post(client, "and now?")
            replies = wait_for(lambda: _replies(client).get(third) and _replies(client), 60, "the third reply")
            status = {m["id"]: m["status"] for m in client.get("/v1/channels/general/messages").json()["messages"]}
    finally:
        daemon.stop()
    assert set(replies) == {third}
    assert (status[first], status[second], status[third]) == ("failed", "failed", "answered")
    assert len(fake_openai.chat_requests()) == 2  # the second never reached the model
