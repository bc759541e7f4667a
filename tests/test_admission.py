"""Admission control: past the daemon's or a channel's bound on messages accepted and not yet
answered, a post is refused with 429 + Retry-After and nothing is stored; every accepted message
is answered once; clients that retry through the 429s lose and duplicate nothing.

The bounds are made small in the config, and a turn held in the fake model keeps its channel
busy, so a refusal happens on purpose, not by timing."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentd import Overloaded
from agentd.app import App
from agentd.client import AgentdClient, AsyncAgentdClient, DaemonUnreachable
from agentd.config import DaemonConfig, load_config
from agentd.embedders.local import LocalEmbedder
from agentd.runtime import Done, Error, Event, Runtime
from agentd.runtime.admission import MIN_PENDING, MIN_PENDING_PER_CHANNEL, START_RATE, Admission
from tests.conftest import agentd_process, write_home
from tests.support import Running, wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona
from tests.support.pgserver import PostgresDatabases

pytestmark = pytest.mark.both_backends

OFFLINE = 'name = "quick"\nmodel = "offline"\nmax_reply_tokens = 64\nskills = []\nsystem_prompt = "Be brief."\n'
BOUNDS = "[daemon]\nmax_pending = 3\nmax_pending_per_channel = 2\n"


@pytest.fixture
def app(
    tmp_path: Path, database_url: str, embedder: LocalEmbedder, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> Iterator[App]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    home = write_home(
        tmp_path / "home",
        BOUNDS,
        {"quick": OFFLINE, "fake": fake_persona(fake_openai.url, skills="[]")},
        database_url=database_url,
    )
    made = App(load_config(home, environ={}), embedder=embedder)
    yield made
    made.close()


@pytest.fixture
def runtime(app: App) -> Iterator[Runtime]:
    rt = Runtime(app)
    yield rt
    rt.stop(grace=5)


def user_messages(app: App, channel: str) -> list[Any]:
    with app.store.read() as conn:
        return [m for m in app.store.messages.after(conn, channel, 0, 1000) if m.role == "user"]


def replies_per_message(app: App, channel: str) -> Counter[int]:
    with app.store.read() as conn:
        stored = app.store.messages.after(conn, channel, 0, 1000)
    return Counter(m.reply_to for m in stored if m.role == "assistant" and m.reply_to is not None)


def test_past_the_channel_and_the_daemon_bound_a_message_is_refused_unstored_and_the_accepted_are_answered_once(
    app: App, runtime: Runtime, fake_openai: FakeOpenAI
) -> None:
    """Channel bound 2, daemon bound 3. A turn held in the model keeps "general" busy: its third
    message is refused (channel), then a message elsewhere is accepted (3 in all) and the next one
    refused (daemon). Nothing refused is stored; once the model answers, every accepted message
    has exactly one reply, and there is room again."""
    fake_openai.queue(Turn(hang=True, text="first"))
    finals: list[Event] = []
    lock = threading.Lock()

    def sink(event: Event) -> None:
        if isinstance(event, Done | Error):
            with lock:
                finals.append(event)

    accepted = [runtime.submit("fake", "general", "alice", "one", sink=sink).message_id]
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    accepted.append(runtime.submit("fake", "general", "alice", "two", sink=sink).message_id)
    with pytest.raises(Overloaded, match="channel 'general' has 2 messages waiting") as refused:
        runtime.submit("fake", "general", "alice", "three", sink=sink)
    assert refused.value.retry_after >= 1
    assert [m.content for m in user_messages(app, "general")] == ["one", "two"]

    accepted.append(runtime.submit("fake", "elsewhere", "bob", "four", sink=sink).message_id)
    with pytest.raises(Overloaded, match="agentd has 3 messages waiting"):
        runtime.submit("quick", "third", "carol", "five", sink=sink)
    assert user_messages(app, "third") == []

    fake_openai.release()
    assert runtime.wait_idle(120)
    assert sorted(e.user_message_id for e in finals if isinstance(e, Done)) == sorted(accepted)
    assert [e for e in finals if isinstance(e, Error)] == []
    answered = replies_per_message(app, "general") + replies_per_message(app, "elsewhere")
    assert answered == Counter(accepted)  # each accepted message once, nothing else
    # The tickets were given back: the refused messages can be posted now.
    runtime.submit("fake", "general", "alice", "three", sink=sink)
    runtime.submit("quick", "third", "carol", "five", sink=sink)
    assert runtime.wait_idle(120)


def test_the_bounds_follow_the_measured_reply_rate_and_turn_time() -> None:
    """With a clock the test moves: before anything is answered the daemon's bound is the wait ×
    the starting rate; after busy seconds of eight replies each it is the wait × 8/s, and a channel
    whose turns take 0.5 s each holds the wait ÷ 0.5 s."""
    now = [100.0]
    admission = Admission(DaemonConfig(admission_wait_seconds=5.0), clock=lambda: now[0])
    start = admission.bounds()
    assert start.max_pending == max(MIN_PENDING, int(5.0 * START_RATE))
    for _ in range(30):
        tickets = [admission.admit("p", f"channel{i}") for i in range(8)]
        for ticket in tickets:  # eight replies over one second, all the while busy
            now[0] += 0.125
            admission.release(ticket)
    measured = admission.bounds()
    assert measured.replies_per_second == pytest.approx(8.0)
    assert measured.max_pending == 40
    assert measured.pending == 0
    # One channel answering back to back, 0.5 s per turn, for a while.
    for _ in range(60):
        ticket = admission.admit("p", "serial")
        now[0] += 0.5
        admission.release(ticket)
    assert admission.bounds().turn_seconds == pytest.approx(0.5, rel=0.01)
    assert admission.bounds().max_pending_per_channel == 10


def test_a_slow_model_still_lets_a_person_send_a_few_lines_in_a_row() -> None:
    """Turns of 20 s against a 4 s wait: W ÷ T is below one, and the channel still holds its
    floor of places (a second line sent while the first is answered is not refused); past the
    floor the next is refused with a Retry-After of at least one turn."""
    now = [100.0]
    admission = Admission(DaemonConfig(admission_wait_seconds=4.0), clock=lambda: now[0])
    for _ in range(40):
        ticket = admission.admit("p", "slow")
        now[0] += 20.0
        admission.release(ticket)
    assert admission.bounds().turn_seconds > 10
    held = [admission.admit("p", "slow") for _ in range(MIN_PENDING_PER_CHANNEL)]
    assert len(held) == MIN_PENDING_PER_CHANNEL
    with pytest.raises(Overloaded) as refused:
        admission.admit("p", "slow")
    assert refused.value.retry_after >= 10


@pytest.fixture
def busy(daemons: Any, fake_openai: FakeOpenAI) -> Running:
    """A daemon with small bounds whose "general" channel is held by a turn waiting on the model."""
    d: Running = daemons(BOUNDS, {"fake": fake_persona(fake_openai.url, skills="[]")})
    fake_openai.queue(Turn(hang=True, text="held"))
    first = d.client.post("/v1/channels/general/messages", json={"user": "alice", "text": "one", "persona": "fake"})
    assert first.status_code == 202, first.text
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    second = d.client.post("/v1/channels/general/messages", json={"user": "alice", "text": "two", "persona": "fake"})
    assert second.status_code == 202, second.text
    return d


def test_a_refused_post_is_429_overloaded_with_retry_after_and_stores_nothing(
    busy: Running, fake_openai: FakeOpenAI
) -> None:
    refused = busy.client.post(
        "/v1/channels/general/messages", json={"user": "alice", "text": "three", "persona": "fake"}
    )
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "overloaded"
    assert error["field"] is None
    assert "nothing was stored" in error["message"]
    assert [m["content"] for m in busy.messages("general")] == ["one", "two"]
    # /v1/chat is refused the same way, before its stream starts.
    chat = busy.client.post(
        "/v1/chat", json={"persona": "fake", "channel": "general", "user": "alice", "message": "three"}
    )
    assert chat.status_code == 429
    assert chat.json()["error"]["code"] == "overloaded"
    fake_openai.release()


def test_the_openai_route_answers_a_refusal_in_openais_shape(busy: Running, fake_openai: FakeOpenAI) -> None:
    """The SDK raises its RateLimitError; the body is OpenAI's error object, Retry-After is sent, and
    neither the new message nor the conversation's earlier ones were stored."""
    sdk = openai.OpenAI(base_url=f"{busy.url}/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.chat.completions.create(
            model="fake",
            user="alice",
            metadata={"channel": "general"},
            messages=[
                {"role": "user", "content": "an earlier question"},
                {"role": "assistant", "content": "an earlier answer"},
                {"role": "user", "content": "three"},
            ],
        )
    assert refused.value.status_code == 429
    assert int(refused.value.response.headers["retry-after"]) >= 1
    error = refused.value.response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"], error["param"]) == ("rate_limit_error", "overloaded", None)
    assert [m["content"] for m in busy.messages("general")] == ["one", "two"]
    fake_openai.release()


class Counting(httpx.HTTPTransport):
    """A real transport that counts the answers by status (in ``statuses``, which several may share)."""

    def __init__(self, statuses: Counter[int], lock: threading.Lock) -> None:
        super().__init__()
        self.statuses = statuses
        self._lock = lock

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        with self._lock:
            self.statuses[response.status_code] += 1
        return response


def test_clients_retrying_through_429s_lose_and_duplicate_nothing(busy: Running, fake_openai: FakeOpenAI) -> None:
    """Four clients post to the busy channel at once: they are refused (429) while it is full, wait
    as asked and post again. Once the held turn ends, every post is stored exactly once and every
    message of the channel is answered exactly once."""
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    texts = [f"retry {i}" for i in range(4)]
    posted: dict[str, int] = {}
    failures: list[BaseException] = []

    def post(text: str) -> None:
        try:
            with AgentdClient(busy.url, transport=Counting(statuses, lock), busy_patience=300) as client:
                posted[text] = client.post("general", "alice", text, persona="fake").id
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=post, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    wait_for(lambda: statuses[429] >= len(texts), 60, "every client to be refused once")
    assert posted == {}
    fake_openai.release()
    for t in threads:
        t.join(240)
    assert failures == []
    assert sorted(posted) == texts
    stored = busy.messages("general")
    users = [m for m in stored if m["role"] == "user"]
    assert sorted(m["content"] for m in users) == sorted(["one", "two", *texts])  # each once
    assert {posted[t] for t in texts} == {m["id"] for m in users if m["content"] in texts}

    def all_answered() -> bool:
        return len([m for m in busy.messages("general") if m["role"] == "assistant"]) >= len(users)

    wait_for(all_answered, 120, "every message's reply")
    replies = Counter(m["reply_to"] for m in busy.messages("general") if m["role"] == "assistant")
    assert replies == Counter(m["id"] for m in users)


def test_the_async_client_waits_out_429s_too_and_stores_each_post_once(busy: Running, fake_openai: FakeOpenAI) -> None:
    """AsyncAgentdClient.post, refused while the channel is full, posts again after Retry-After."""
    statuses: Counter[int] = Counter()

    class Counting(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            response = await super().handle_async_request(request)
            statuses[response.status_code] += 1
            return response

    async def main() -> list[int]:
        async with AsyncAgentdClient(busy.url, transport=Counting(), busy_patience=300) as client:
            posts = [asyncio.create_task(client.post("general", "bob", f"async {i}", persona="fake")) for i in (1, 2)]
            while statuses[429] < 2:
                await asyncio.sleep(0.05)
            fake_openai.release()
            return [(await p).id for p in posts]

    ids = asyncio.run(asyncio.wait_for(main(), 240))
    users = [m for m in busy.messages("general") if m["role"] == "user"]
    assert sorted(m["content"] for m in users) == ["async 1", "async 2", "one", "two"]
    assert sorted(ids) == sorted(m["id"] for m in users if m["content"].startswith("async"))


def test_in_a_cluster_each_daemon_bounds_what_it_accepted_until_the_owners_reply_reaches_it(
    tmp_path: Path, postgres: PostgresDatabases, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runtimes on one PostgreSQL, one message per channel each. The first owns the channel and
    holds its turn in the model; the second accepts one message for it (answered by the owner) and
    refuses the next; once the owner's reply is relayed back, the second has room again."""
    monkeypatch.setenv(KEY_ENV, "test-key")
    config = (
        '[embedding]\nprovider = "none"\n[daemon]\nmax_pending_per_channel = 1\n'
        "[cluster]\nheartbeat_seconds = 0.5\nlease_seconds = 4\n"
    )
    personas = {"fake": fake_persona(fake_openai.url, skills="[]")}
    url = postgres.fresh()
    apps = [App(load_config(write_home(tmp_path / f"h{i}", config, personas, url), environ={})) for i in (0, 1)]
    owner, other = (Runtime(a) for a in apps)
    try:
        fake_openai.queue(Turn(hang=True, text="held"))
        owner.submit("fake", "c01", "u", "one")
        wait_for(lambda: fake_openai.hanging == 1, 60, "the owner's turn to wait on the model")
        assert owner.health()["cluster"]["channels"] == 1
        with pytest.raises(Overloaded):
            owner.submit("fake", "c01", "u", "refused by the owner")
        finals: list[Event] = []
        other.submit("fake", "c01", "v", "two", sink=finals.append)
        assert other.health()["cluster"]["channels"] == 0  # forwarded to the owner
        with pytest.raises(Overloaded, match="channel 'c01' has 1 messages waiting"):
            other.submit("fake", "c01", "v", "refused by the other")
        fake_openai.release()
        wait_for(lambda: any(isinstance(e, Done | Error) for e in finals), 60, "the owner's reply, relayed")
        assert isinstance(finals[-1], Done)
        other.submit("fake", "c01", "v", "three")  # room again
        assert owner.wait_idle(60)
        with apps[0].store.read() as conn:
            texts = [m.content for m in apps[0].store.messages.after(conn, "c01", 0, 100) if m.role == "user"]
        assert texts == ["one", "two", "three"]
    finally:
        for rt in (owner, other):
            rt.stop(2)
        for a in apps:
            a.close()


def test_agentd_post_fails_at_once_with_no_patience_and_otherwise_waits_out_the_429s(
    busy: Running, fake_openai: FakeOpenAI
) -> None:
    """`agentd post --busy-wait 0` to a full channel exits 2 naming the code; with the default wait it
    is refused, posts again after Retry-After once there is room, prints the reply, and the message
    is stored once."""
    env = {KEY_ENV: "test-key"}
    args = ("post", "general", "--persona", "fake", "--url", busy.url)
    refused = agentd_process(*args[:2], "impatient", *args[2:], "--busy-wait", "0", config=busy.home, env=env)
    assert refused.returncode == 2, refused.stderr
    assert "overloaded" in refused.stderr
    done: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: done.update(result=agentd_process(*args[:2], "patient", *args[2:], config=busy.home, env=env))
    )
    thread.start()
    wait_for(lambda: busy.client.get("/healthz").json()["admission"]["refused"] >= 2, 60, "the patient post's 429")
    fake_openai.release()
    thread.join(180)
    result = done["result"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("patient")  # the reply (the fake model echoes the prompt)
    assert [m["content"] for m in busy.messages("general") if m["role"] == "user"] == ["one", "two", "patient"]


@pytest.mark.sqlite_only
def test_with_worker_processes_the_daemon_counts_its_turns_until_the_workers_reply(
    app: App, fake_openai: FakeOpenAI
) -> None:
    """Worker processes answer the turns (``[runtime] workers``); the daemon holds each message's place
    until the worker's reply comes back, so the channel bound holds there too, and is given back."""
    runtime = Runtime(app, workers=1)
    try:
        fake_openai.queue(Turn(hang=True, text="held"))
        finals: list[Event] = []
        runtime.submit("fake", "general", "alice", "one", sink=finals.append)
        wait_for(lambda: fake_openai.hanging == 1, 120, "the worker's turn to wait on the model")
        runtime.submit("fake", "general", "alice", "two", sink=finals.append)
        with pytest.raises(Overloaded):
            runtime.submit("fake", "general", "alice", "three", sink=finals.append)
        assert runtime.health()["admission"]["pending"] == 2
        fake_openai.release()
        assert runtime.wait_idle(120)
        assert sorted(e.type for e in finals if isinstance(e, Done | Error)) == ["done", "done"]
        assert runtime.health()["admission"]["pending"] == 0
        runtime.submit("fake", "general", "alice", "three", sink=finals.append)
        assert runtime.wait_idle(120)
        assert replies_per_message(app, "general") == Counter(m.id for m in user_messages(app, "general"))
    finally:
        runtime.stop(grace=5)


def test_a_post_whose_answer_never_came_is_not_sent_again() -> None:
    """A server that takes the request and never answers: the daemon may have stored it, so the client
    raises DaemonUnreachable after the one request instead of posting a second copy."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    requests: list[bytes] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            requests.append(conn.recv(65536))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = AgentdClient(f"http://127.0.0.1:{port}", timeout=1.0, busy_patience=60)
        with client, pytest.raises(DaemonUnreachable):
            client.post("general", "alice", "maybe stored")
        assert len(requests) == 1
        assert b"POST /v1/channels/general/messages" in requests[0]
    finally:
        server.close()
        for conn in held:
            conn.close()
