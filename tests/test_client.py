"""agentd.client against a real daemon: every call, blocking and asyncio, answered with the models the
API serves (fields a newer daemon adds ignored), one exception class per error code, the SSE last
event id kept across events without ids, and a feed that resumes across a daemon restart on the
same port without losing or repeating a message. The feed's and the post's programs (sans I/O)
are also driven by hand, step by step."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent

from agentd._exceptions import CATALOGUE, ErrorCode
from agentd.api import DaemonServer
from agentd.app import App
from agentd.client import AgentdClient, ApiError, AsyncAgentdClient, DaemonUnreachable, StreamEvent, _calls, errors
from agentd.client._feed import FeedState, following
from agentd.client._program import NEXT, Emit, Open, Send, Wait, posting, unreachable
from agentd.client.errors import error_from
from agentd.client.retry import Patience
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.schemas.responses import (
    BudgetResponse,
    Health,
    KnownFactsResponse,
    MemoryHitOut,
    MemoryOut,
    MessageOut,
    PersonaOut,
    PostAccepted,
)
from tests.conftest import REPO, write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona


def test_every_call_of_the_blocking_client(daemons, fake_openai) -> None:
    d = daemons('[daemon]\napi_key = "k"\n[channels.general]\npersonas = ["fake"]\nvisibility = "direct"\n')
    with AgentdClient(d.url, "k") as client:
        health = client.health()
        assert isinstance(health, Health)
        assert health.status == "ok"
        personas = client.personas()
        assert all(isinstance(p, PersonaOut) for p in personas)
        assert [p.name for p in personas] == ["fake"]
        assert client.bindings() == {"general": ["fake"]}
        memory, created = client.add_memory("fake", "Alice's favorite color is blue", user="alice", category="pref")
        assert isinstance(memory, MemoryOut)
        assert created is True
        assert (memory.scope, memory.category, memory.persona) == ("user:alice", "pref", "fake")
        assert client.add_memory("fake", "Alice's favorite color is blue", user="alice") == (memory, False)
        found = client.search_memories("What is my favorite color?", user="alice", persona="fake")
        assert all(isinstance(hit, MemoryHitOut) for hit in found)
        assert [m.id for m in found] == [memory.id]
        assert found[0].relevance >= 0.5
        assert client.search_memories("What is my favorite color?", user="bob", persona="fake") == []
        known = client.memory_context("alice", "What is my favorite color?", persona="fake")
        assert isinstance(known, KnownFactsResponse)
        assert known.memoriesUsed == 1
        assert "favorite color is blue" in known.context
        listed = client.list_memories("fake", scope="user:alice")
        assert listed == [memory]
        events = list(client.chat("fake", "general", "alice", "What is my favorite color?"))
        assert [e.event for e in events][0] == "memory_context"
        assert events[-1].event == "done"
        assert events[0].data["memories"][0]["text"] == "Alice's favorite color is blue"
        assert "".join(e.data["text"] for e in events if e.event == "token_delta") == events[-1].data["text"]
        posted = client.post("general", "alice", "and now?")
        assert isinstance(posted, PostAccepted)
        assert (posted.channel, posted.persona) == ("general", "fake")
        said = client.messages("general")
        assert all(isinstance(m, MessageOut) for m in said)
        assert [(m.role, m.author, m.content) for m in said if m.id == posted.id] == [("user", "alice", "and now?")]
        budget = client.budget("fake", "general", user="alice")
        assert isinstance(budget, BudgetResponse)
        assert budget.budget["history_messages"] >= 2
        forgotten = client.forget_memory(memory.id)
        assert isinstance(forgotten, MemoryOut)
        assert forgotten == memory
        assert client.list_memories("fake", scope="user:alice") == []


def test_each_error_the_daemon_answers_raises_the_class_of_its_code(daemons, fake_openai) -> None:
    d = daemons('[daemon]\napi_key = "k"\n[channels.general]\npersonas = ["fake"]\n')
    with AgentdClient(d.url, "k") as client:
        with pytest.raises(errors.NotFoundError) as missing:
            client.forget_memory(10**9)
        assert missing.value.status == 404
        assert missing.value.remote_code == "not_found"
        # Each code raises its own class, an ApiError still (its code is the client's, as before).
        assert isinstance(missing.value, ApiError)
        assert missing.value.code == "daemon_error"
        with pytest.raises(errors.InvalidInputError) as bad:
            client.post("general", "alice", "   ")
        assert bad.value.status == 422
        assert bad.value.field == "text"
        with pytest.raises(errors.NotFoundError) as nobody:
            client.budget("nobody", "general")
        assert nobody.value.field == "persona"
    with AgentdClient(d.url, "wrong") as client, pytest.raises(errors.UnauthorizedError) as refused:
        client.personas()
    assert refused.value.status == 401
    assert refused.value.remote_code == "unauthorized"
    with AgentdClient("http://127.0.0.1:9", timeout=5) as client, pytest.raises(DaemonUnreachable):
        client.health()


def test_every_code_of_the_catalogue_has_its_client_exception() -> None:
    answered_by_the_daemon = [c for c in CATALOGUE if c not in (ErrorCode.DAEMON_ERROR, ErrorCode.DAEMON_UNREACHABLE)]
    for code in answered_by_the_daemon:
        kind = errors.ERRORS.get(str(code))
        assert kind is not None, f"agentd.client.errors has no class for {code!r}"
        assert issubclass(kind, ApiError)
        assert kind.remote is code
        assert getattr(errors, kind.__name__) is kind
        assert kind.__name__ in errors.__all__
        # As the daemon answers it: its status, its body.
        status = CATALOGUE[code].status
        body = json.dumps({"error": {"code": str(code), "field": "f", "message": "no"}}).encode()
        raised = error_from(httpx.Response(status), body)
        assert type(raised) is kind
        assert (raised.status, raised.remote_code, raised.field, raised.reason) == (status, str(code), "f", "no")
    assert len(set(errors.ERRORS.values())) == len(answered_by_the_daemon)


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (429, "budget_exceeded", errors.BudgetExceededError),
        (404, "not_found", errors.NotFoundError),
        (502, "llm_auth", errors.LLMAuthError),
        (418, "from_a_newer_daemon", ApiError),
    ],
)
def test_an_error_answer_raises_the_class_of_its_code(status: int, code: str, expected: type[ApiError]) -> None:
    body = f'{{"error": {{"code": "{code}", "field": null, "message": "no"}}}}'.encode()
    raised = error_from(httpx.Response(status), body)
    assert type(raised) is expected
    assert raised.remote_code == code
    assert raised.code == ErrorCode.DAEMON_ERROR  # unchanged: what the client raises, not what the daemon said
    assert raised.status == status


#: The field a newer daemon adds to every object it answers with.
NEW_FIELD = "added_by_a_newer_daemon"


#: Answers' free-form maps (names to values): a newer daemon adds no field to those.
MAPS = frozenset({"channel_bindings", "metadata"})


def _with_new_fields(value: Any) -> Any:
    if isinstance(value, dict):
        fields = {k: v if k in MAPS else _with_new_fields(v) for k, v in value.items()}
        return {**fields, NEW_FIELD: {"nested": [1, 2]}}
    if isinstance(value, list):
        return [_with_new_fields(v) for v in value]
    return value


class NewerDaemon(httpx.BaseTransport):
    """The real daemon over HTTP, its JSON answers carrying a field more in every object (as a newer
    daemon's may); ``added`` counts the answers changed."""

    def __init__(self) -> None:
        self._http = httpx.HTTPTransport()
        self.added = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._http.handle_request(request)
        if not response.headers.get("content-type", "").startswith("application/json"):
            return response
        body = json.loads(response.read())
        response.close()
        self.added += 1
        return httpx.Response(response.status_code, json=_with_new_fields(body))

    def close(self) -> None:
        self._http.close()


def test_fields_a_newer_daemon_adds_are_ignored(daemons, fake_openai) -> None:
    d = daemons('[channels.general]\npersonas = ["fake"]\n')
    newer = NewerDaemon()
    with AgentdClient(d.url, transport=newer) as client:
        assert client.health().status == "ok"
        assert [p.name for p in client.personas()] == ["fake"]
        memory, created = client.add_memory("fake", "Bob keeps bees", user="bob")
        assert created
        assert [h.id for h in client.search_memories("does bob keep bees?", user="bob")] == [memory.id]
        assert client.memory_context("bob", "bees?", persona="fake").memoriesUsed == 1
        assert client.list_memories("fake") == [memory]
        posted = client.post("general", "bob", "hello")
        wait_for(lambda: len(client.messages("general")) == 2, 60, "the reply")
        assert client.messages("general")[0].id == posted.id
        assert client.budget("fake", "general").persona == "fake"
        assert client.forget_memory(memory.id) == memory
        with pytest.raises(errors.NotFoundError):
            client.forget_memory(memory.id)
    assert newer.added >= 12
    # Nothing of the new field is kept: the models are the API's own.
    assert NEW_FIELD not in memory.model_dump()
    assert not hasattr(memory, NEW_FIELD)


def test_a_feed_resumes_and_ends_as_its_program_says() -> None:
    """The feed's program alone (no I/O): it resumes after the last id, after a backoff, when a
    stream ends or its connection fails; an error answer below 500 ends it."""
    feed = FeedState("general", None, reconnect=True, stop=threading.Event())
    program = following(feed)
    assert program.send(None) == Open("GET", "/v1/channels/general/events", {})
    assert program.send(httpx.Response(200)) == NEXT
    message = ServerSentEvent(event="message", data='{"id": 5}', id="5", retry=2000)
    assert program.send(message) == Emit(StreamEvent("open", {"channel": "general"}, "5"))
    assert program.send(None) == Emit(StreamEvent("message", {"id": 5}, "5"))
    assert program.send(None) == NEXT
    # A live event has no id of its own: the decoder gives it the stream's last one.
    assert program.send(ServerSentEvent(event="token_delta", data='{"text": "hi"}', id="5")) == Emit(
        StreamEvent("token_delta", {"text": "hi"}, "5")
    )
    assert program.send(None) == NEXT
    wait = program.send(None)  # the stream ended
    assert isinstance(wait, Wait)
    assert wait.seconds >= 2.0  # the server's retry: is the floor
    assert program.send(None) == Open("GET", "/v1/channels/general/events", {"Last-Event-ID": "5"})
    dropped = unreachable("http://x", httpx.ConnectError("refused"))
    assert isinstance(program.send(dropped), Wait)
    assert program.send(None) == Open("GET", "/v1/channels/general/events", {"Last-Event-ID": "5"})
    refused = httpx.Response(404, json={"error": {"code": "not_found", "field": "channel", "message": "no"}})
    with pytest.raises(errors.NotFoundError):
        program.send(refused)

    once = following(FeedState("general", "7", reconnect=False, stop=threading.Event()))
    assert once.send(None) == Open("GET", "/v1/channels/general/events", {"Last-Event-ID": "7"})
    with pytest.raises(DaemonUnreachable):
        once.send(dropped)


def test_a_refused_post_is_posted_again_after_retry_after() -> None:
    call = _calls.post("general", "alice", "hi", None, False)
    program = posting(call, Patience(60.0))
    assert program.send(None) == Send(call)
    busy = {"error": {"code": "overloaded", "field": None, "message": "busy"}}
    wait = program.send(httpx.Response(429, headers={"Retry-After": "1"}, json=busy))
    assert isinstance(wait, Wait)
    assert 1.0 <= wait.seconds <= 1.25
    assert program.send(None) == Send(call)
    accepted = {"id": 3, "channel": "general", "persona": "fake", "request_id": "r", "status": "queued"}
    with pytest.raises(StopIteration) as done:
        program.send(httpx.Response(202, json=accepted))
    assert done.value.value == PostAccepted(**accepted)
    # A timeout may have been stored: not posted again.
    program = posting(call, Patience(60.0))
    program.send(None)
    with pytest.raises(DaemonUnreachable):
        program.send(unreachable("http://x", httpx.ReadTimeout("slow")))


def test_the_old_names_of_answers_still_work_and_say_what_replaces_them() -> None:
    import agentd.client

    with pytest.warns(DeprecationWarning, match="agentd.schemas.responses.MemoryOut"):
        assert agentd.client.Memory is MemoryOut
    with pytest.warns(DeprecationWarning, match="PostAccepted"):
        assert agentd.client.Posted is PostAccepted
    with pytest.raises(AttributeError):
        agentd.client.Nothing  # noqa: B018


def test_the_wheel_ships_py_typed() -> None:
    from hatchling.builders.wheel import WheelBuilder

    shipped = {f.distribution_path for f in WheelBuilder(str(REPO)).recurse_included_files()}
    assert "agentd/py.typed" in shipped
    assert "agentd/schemas/responses.py" in shipped


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
            health = await client.health()
            assert isinstance(health, Health)
            assert health.status == "ok"
            assert [p.name for p in await client.personas()] == ["fake"]
            assert await client.bindings() == {"general": ["fake"]}
            memory, _ = await client.add_memory("fake", "Async Alice likes tea", user="alice")
            names = [e.event async for e in client.chat("fake", "general", "alice", "hello")]
            feed = client.follow("general", last_event_id="0", reconnect=False)
            replayed = []
            async for event in feed:
                if event.event == "message":
                    replayed.append(event.data)
                    if len(replayed) == 2:
                        feed.close()
            said = await client.messages("general")
            assert [m.id for m in said] == [m["id"] for m in replayed]
            found = await client.search_memories("does alice like tea?", user="alice")
            assert [m.id for m in found] == [memory.id]
            assert isinstance(found[0], MemoryHitOut)
            known = await client.memory_context("alice", "does alice like tea?", persona="fake")
            assert known.memoriesUsed == 1
            assert (await client.budget("fake", "general", user="alice")).channel == "general"
            posted = await client.post("general", "alice", "more")
            assert isinstance(posted, PostAccepted)
            assert await client.forget_memory(memory.id) == memory
            with pytest.raises(errors.NotFoundError):
                await client.forget_memory(memory.id)
            return names, replayed, len(await client.list_memories("fake"))

    names, replayed, left = asyncio.run(main())
    assert names[0] == "memory_context"
    assert names[-1] == "done"
    assert [m["content"] for m in replayed] == ["hello", "Hi from async."]
    assert left == 0
