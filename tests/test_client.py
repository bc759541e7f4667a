"""agentd.client against a real daemon: every call, blocking and asyncio, the SSE last
event id kept across events without ids, and a feed that resumes across a daemon
restart on the same port without losing or repeating a message."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentd.api import DaemonServer
from agentd.app import App
from agentd.client import AgentdClient, ApiError, AsyncAgentdClient, DaemonUnreachable, StreamEvent, errors
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from tests.conftest import write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona


def test_every_call_of_the_blocking_client(daemons, fake_openai) -> None:
    d = daemons('[daemon]\napi_key = "k"\n[channels.general]\npersonas = ["fake"]\nvisibility = "direct"\n')
    with AgentdClient(d.url, "k") as client:
        assert client.health()["status"] == "ok"
        assert [p["name"] for p in client.personas()] == ["fake"]
        memory, created = client.add_memory("fake", "Alice's favorite color is blue", user="alice", category="pref")
        assert created
        assert memory.scope == "user:alice"
        assert memory.category == "pref"
        assert client.add_memory("fake", "Alice's favorite color is blue", user="alice")[1] is False
        found = client.search_memories("What is my favorite color?", user="alice", persona="fake")
        assert [m.id for m in found] == [memory.id]
        assert found[0].relevance is not None
        assert found[0].relevance >= 0.5
        assert client.search_memories("What is my favorite color?", user="bob", persona="fake") == []
        known = client.memory_context("alice", "What is my favorite color?", persona="fake")
        assert known["memoriesUsed"] == 1
        assert "favorite color is blue" in known["context"]
        assert [m.id for m in client.list_memories("fake", scope="user:alice")] == [memory.id]
        events = list(client.chat("fake", "general", "alice", "What is my favorite color?"))
        assert [e.event for e in events][0] == "memory_context"
        assert events[-1].event == "done"
        assert events[0].data["memories"][0]["text"] == "Alice's favorite color is blue"
        assert "".join(e.data["text"] for e in events if e.event == "token_delta") == events[-1].data["text"]
        budget = client.budget("fake", "general", user="alice")
        assert budget["budget"]["history_messages"] == 2
        assert client.forget_memory(memory.id).id == memory.id
        assert client.list_memories("fake", scope="user:alice") == []
        with pytest.raises(ApiError) as missing:
            client.forget_memory(memory.id)
        assert missing.value.status == 404
        assert missing.value.remote_code == "not_found"
        # Each code raises its own class, an ApiError still (its code is the client's, as before).
        assert type(missing.value) is errors.NotFoundError
        assert missing.value.code == "daemon_error"
        with pytest.raises(errors.InvalidInputError) as bad:
            client.post("general", "alice", "   ")
        assert bad.value.status == 422
        assert bad.value.field == "text"
    with AgentdClient(d.url, "wrong") as client, pytest.raises(errors.UnauthorizedError) as refused:
        client.personas()
    assert refused.value.status == 401
    assert refused.value.remote_code == "unauthorized"
    with AgentdClient("http://127.0.0.1:9", timeout=5) as client, pytest.raises(DaemonUnreachable):
        client.health()


def test_the_last_event_id_persists_across_events_without_ids(daemons, fake_openai) -> None:
    d = daemons('[channels.general]\npersonas = ["fake"]\n')
    with AgentdClient(d.url) as client:
        seen: list[StreamEvent] = []
        feed = client.follow("general", reconnect=False)
        for event in feed:
            seen.append(event)
            if event.event == "open":
                posted = client.post("general", "alice", "hello")
            if event.event == "message" and event.data["role"] == "assistant":
                feed.close()
        names = [e.event for e in seen]
        assert names[:2] == ["open", "message"]
        assert "memory_context" in names
        user_msg = seen[1]
        assert user_msg.data["id"] == posted.id
        assert user_msg.last_event_id == str(posted.id)
        live = [e for e in seen if e.event in ("memory_context", "token_delta", "done")]
        # Live events carry no id: the stream's last event id is still the user message's.
        assert live
        assert all(e.last_event_id == str(posted.id) for e in live)
        reply = seen[-1]
        assert reply.data["reply_to"] == posted.id
        assert reply.last_event_id == str(reply.data["id"])
        assert feed.last_event_id == str(reply.data["id"])


class Daemon:
    """A daemon that can be stopped and started again over the same files, on the same port: the first
    start listens on port 0 (the port the system gives it), a restart on the port it got."""

    def __init__(self, home: Path, embedder: LocalEmbedder, port: int = 0) -> None:
        self.home, self.port, self.embedder = home, port, embedder
        self.server: DaemonServer | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        app = App(load_config(self.home, environ={}), embedder=self.embedder)
        self.server = DaemonServer(app, "127.0.0.1", self.port)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server is not None and self.server.started, 30, "the daemon to start")
        self.port = int(self.server.url.rsplit(":", 1)[1].rstrip("/"))

    def stop(self) -> None:
        assert self.server is not None
        assert self.thread is not None
        self.server.request_stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def restartable(tmp_path, fake_openai: FakeOpenAI, embedder, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "test-key")
    home = write_home(tmp_path, '[channels.general]\npersonas = ["fake"]\n', {"fake": fake_persona(fake_openai.url)})
    daemon = Daemon(home, embedder)
    daemon.start()
    yield daemon
    if daemon.thread is not None and daemon.thread.is_alive():
        daemon.stop()


def test_a_feed_resumes_across_a_daemon_restart_without_loss_or_repeats(restartable, fake_openai) -> None:
    url = f"http://127.0.0.1:{restartable.port}"
    with AgentdClient(url) as client:
        feed = client.follow("general")
        feed.backoff.first = 0.05
        messages: list[dict] = []
        opened = threading.Event()
        reconnected = threading.Event()

        def read() -> None:
            opens = 0
            for event in feed:
                if event.event == "open":
                    opens += 1
                    (opened if opens == 1 else reconnected).set()
                elif event.event == "message":
                    messages.append(event.data)
                    if len(messages) == 4:
                        return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert opened.wait(30)
        client.post("general", "alice", "before")
        wait_for(lambda: len(messages) == 2, 60, "the first reply")
        restartable.stop()
        with pytest.raises(DaemonUnreachable):
            client.post("general", "alice", "while down")
        restartable.start()
        client.post("general", "alice", "after")
        reader.join(60)
        feed.close()
    assert reconnected.is_set()
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "before"),
        ("assistant", "echo: before"),
        ("user", "after"),
        ("assistant", "echo: after"),
    ]


def test_the_asyncio_client(daemons, fake_openai) -> None:
    d = daemons('[channels.general]\npersonas = ["fake"]\n')
    fake_openai.queue(Turn(text="Hi from async."))

    async def main() -> tuple[list[str], list[dict], int]:
        async with AsyncAgentdClient(d.url) as client:
            assert (await client.health())["status"] == "ok"
            memory, _ = await client.add_memory("fake", "Async Alice likes tea", user="alice")
            names = [e.event async for e in client.chat("fake", "general", "alice", "hello")]
            feed = client.follow("general", last_event_id="0", reconnect=False)
            replayed = []
            async for event in feed:
                if event.event == "message":
                    replayed.append(event.data)
                    if len(replayed) == 2:
                        feed.close()
            found = await client.search_memories("does alice like tea?", user="alice")
            assert [m.id for m in found] == [memory.id]
            await client.forget_memory(memory.id)
            return names, replayed, len(await client.list_memories("fake"))

    names, replayed, left = asyncio.run(main())
    assert names[0] == "memory_context"
    assert names[-1] == "done"
    assert [m["content"] for m in replayed] == ["hello", "Hi from async."]
    assert left == 0
