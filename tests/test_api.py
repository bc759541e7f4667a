"""The daemon over real HTTP: chat as server-sent events, channel adapters, bad input,
auth, and many concurrent posts. uvicorn serves on a free loopback port; litellm
talks to the fake OpenAI server; the store is a real SQLite file or PostgreSQL database."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from agentd._exceptions import ConfigError
from agentd.access.scopes import GLOBAL
from agentd.api import DaemonServer
from agentd.app import App
from agentd.config import load_config
from tests.conftest import write_home
from tests.support import follow, wait_for
from tests.support.fakeopenai import Turn, embedding_config, fake_persona

pytestmark = pytest.mark.both_backends

# -- chat ------------------------------------------------------------------------------------------------


def test_chat_streams_the_turn_as_named_sse_events_memory_context_first(daemons, fake_openai) -> None:
    d = daemons()
    d.app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    fake_openai.queue(
        Turn(tool_calls=[("remember", {"text": "User is learning to program", "category": "fact"})]),
        Turn(text="Python is a fine first language."),
    )
    events = d.chat("What programming language should I learn?")
    names = [e.event for e in events]
    assert names[:2] == ["memory_context", "history_context"]
    assert names[-1] == "done"
    assert names.index("tool_call") < names.index("tool_result") < names.index("token_delta")
    assert set(names) == {"memory_context", "history_context", "tool_call", "tool_result", "token_delta", "done"}
    assert all(e.data["type"] == e.event for e in events)  # event: names the JSON in data:
    recalled = events[0].data["memories"]
    assert [m["text"] for m in recalled] == ["User likes Python"]
    assert recalled[0]["category"] == "preference"
    assert recalled[0]["score"] >= 0.5
    assert events[names.index("tool_result")].data["result"]["stored"] is True
    text = "".join(e.data["text"] for e in events if e.event == "token_delta")
    assert text == "Python is a fine first language."
    done = events[-1].data
    assert done["text"] == text
    assert done["usage"]["total_tokens"] > 0
    stored = d.messages("general")
    assert [(m["id"], m["role"], m["status"]) for m in stored] == [
        (done["user_message_id"], "user", "answered"),
        (done["message_id"], "assistant", "complete"),
    ]
    assert stored[1]["content"] == text


def test_disable_memory_is_honoured_per_request(daemons, fake_openai) -> None:
    d = daemons()
    d.app.memory.add("fake", GLOBAL, "User likes Python", "preference")
    events = d.chat("What programming language should I learn?", disable_memory=True)
    assert events[0].event == "memory_context"
    assert events[0].data["status"] == "disabled"
    assert events[0].data["memories"] == []
    assert events[-1].event == "done"


def test_a_slow_embedder_still_gets_a_reply_without_memories(daemons, fake_openai) -> None:
    d = daemons(embedding_config(fake_openai, "[memory]\nretrieval_timeout_seconds = 0.3\n"))
    d.app.memory.add("fake", GLOBAL, "hello there friend")
    fake_openai.embedding_delay = 1.5
    events = d.chat("tell me about my friend there")
    assert events[0].event == "memory_context"
    assert events[0].data["status"] == "timeout"
    assert events[0].data["memories"] == []
    assert [e.event for e in events if e.event == "error"] == []
    assert events[-1].event == "done"
    sent = "\n".join(m["content"] for m in fake_openai.chat_requests()[-1]["messages"] if m["role"] == "system")
    assert "Recalled Memories" not in sent


# -- channel adapters -------------------------------------------------------------------------------------------

BOUND = '[channels.support]\npersonas = ["fake"]\n'


def test_adapter_flow_post_then_events_then_read_back(daemons, fake_openai) -> None:
    d = daemons(BOUND)
    fake_openai.queue(Turn(text="We are open nine to five."))
    follower, thread = follow(d.client, "support", until=lambda evs: any(e.event == "done" for e in evs))
    assert follower.ready.wait(10)
    posted = d.client.post("/v1/channels/support/messages", json={"user": "carol", "text": "When are you open?"})
    assert posted.status_code == 202
    accepted = posted.json()
    assert accepted["persona"] == "fake"
    assert accepted["status"] == "accepted"
    thread.join(60)
    events = follower.snapshot()
    names = [e.event for e in events]
    assert names[:3] == ["message", "memory_context", "history_context"]
    assert names[-2:] == ["message", "done"]
    user_msg, reply = events[0], events[-2]
    assert user_msg.id == str(accepted["id"])
    assert user_msg.data["role"] == "user"
    assert user_msg.data["content"] == "When are you open?"
    assert user_msg.data["author"] == "carol"
    assert reply.data["role"] == "assistant"
    assert reply.data["reply_to"] == accepted["id"]
    assert reply.data["content"] == "We are open nine to five."
    assert reply.id == str(reply.data["id"])
    for live in events[1:-2] + events[-1:]:
        assert live.id is None
        assert live.data["user_message_id"] == accepted["id"]
        assert live.data["persona"] == "fake"
    assert "".join(e.data["text"] for e in events if e.event == "token_delta") == "We are open nine to five."
    # Read back: everything, then only what came after the user message.
    assert [m["id"] for m in d.messages("support")] == [accepted["id"], reply.data["id"]]
    assert [m["content"] for m in d.messages("support", after=accepted["id"])] == ["We are open nine to five."]


def test_the_event_stream_resumes_after_last_event_id_without_loss_or_repeats(daemons, fake_openai) -> None:
    d = daemons(BOUND)
    first = d.client.post("/v1/channels/support/messages", json={"user": "carol", "text": "first"}).json()
    reply1 = wait_for(lambda: [m for m in d.messages("support") if m["reply_to"] == first["id"]], what="reply 1")[0]
    # Disconnected while a second message is posted and answered.
    second = d.client.post("/v1/channels/support/messages", json={"user": "carol", "text": "second"}).json()
    reply2 = wait_for(lambda: [m for m in d.messages("support") if m["reply_to"] == second["id"]], what="reply 2")[0]
    follower, thread = follow(
        d.client,
        "support",
        headers={"Last-Event-ID": str(reply1["id"])},
        until=lambda evs: len([e for e in evs if e.event == "message"]) >= 2,
    )
    thread.join(30)
    replayed = [e for e in follower.snapshot() if e.event == "message"]
    assert [(e.id, e.data["content"]) for e in replayed] == [
        (str(second["id"]), "second"),
        (str(reply2["id"]), "echo: second"),
    ]
    # ?after= replays the same way for a first connection.
    follower, thread = follow(
        d.client, "support", params={"after": 0}, until=lambda evs: len([e for e in evs if e.event == "message"]) >= 4
    )
    thread.join(30)
    assert [e.id for e in follower.snapshot() if e.event == "message"] == [
        str(i) for i in (first["id"], reply1["id"], second["id"], reply2["id"])
    ]


def test_fifty_concurrent_posts_across_ten_channels_all_answered_in_order(daemons, fake_openai) -> None:
    d = daemons()
    fake_openai.chat_delay_per_token = 0.002
    jobs = [(f"room{c}", f"message {c}-{i}") for i in range(5) for c in range(10)]

    def post(job: tuple[str, str]) -> dict[str, Any]:
        channel, text = job
        with httpx.Client(base_url=d.url, timeout=60) as client:
            response = client.post(
                f"/v1/channels/{channel}/messages", json={"persona": "fake", "user": "dave", "text": text}
            )
        assert response.status_code == 202, response.text
        return {**response.json(), "text": text}

    with ThreadPoolExecutor(max_workers=50) as pool:
        accepted = list(pool.map(post, jobs))
    assert len({a["id"] for a in accepted}) == 50

    def all_answered() -> bool:
        return all(len(d.messages(f"room{c}")) == 10 for c in range(10))

    wait_for(all_answered, 120, "50 replies")
    for c in range(10):
        stored = d.messages(f"room{c}")
        users = [m for m in stored if m["role"] == "user"]
        replies = [m for m in stored if m["role"] == "assistant"]
        assert sorted(m["content"] for m in users) == sorted(f"message {c}-{i}" for i in range(5))
        assert all(m["status"] == "answered" for m in users)
        assert all(m["status"] == "complete" for m in replies)
        # In order: the n-th reply answers the n-th message accepted in the channel.
        assert [r["reply_to"] for r in replies] == [u["id"] for u in users]
        by_id = {u["id"]: u["content"] for u in users}
        assert all(r["content"] == f"echo: {by_id[r['reply_to']]}" for r in replies)


# -- bad input -----------------------------------------------------------------------------------------------------

CHAT_OK = {"persona": "fake", "channel": "general", "user": "alice", "message": "hi"}

BAD_REQUESTS = [
    # (method, path, json body or raw bytes, status, code, field)
    ("POST", "/v1/chat", b'{"persona": "fake", "channel": ', 400, "malformed_json", "body"),
    ("POST", "/v1/chat", b"", 422, "invalid_input", "body"),
    ("POST", "/v1/chat", [1, 2], 422, "invalid_input", "body"),
    ("POST", "/v1/chat", {k: v for k, v in CHAT_OK.items() if k != "user"}, 422, "invalid_input", "user"),
    ("POST", "/v1/chat", {**CHAT_OK, "message": 5}, 422, "invalid_input", "message"),
    ("POST", "/v1/chat", {**CHAT_OK, "disable_memory": "yes"}, 422, "invalid_input", "disable_memory"),
    ("POST", "/v1/chat", {**CHAT_OK, "message": "   "}, 422, "invalid_input", "message"),
    ("POST", "/v1/chat", {**CHAT_OK, "mesage": "typo"}, 422, "invalid_input", "mesage"),
    ("POST", "/v1/chat", {**CHAT_OK, "persona": "nobody"}, 404, "not_found", "persona"),
    ("POST", "/v1/chat", {**CHAT_OK, "channel": "two words"}, 422, "invalid_input", "channel"),
    ("POST", "/v1/chat", {**CHAT_OK, "persona": "other", "channel": "support"}, 422, "invalid_input", "persona"),
    ("POST", "/v1/chat", {**CHAT_OK, "message": "x" * 40_000}, 422, "invalid_input", "message"),
    ("POST", "/v1/channels/lobby/messages", {"user": "alice", "text": "hi"}, 422, "invalid_input", "persona"),
    ("POST", "/v1/channels/support/messages", {"user": "alice"}, 422, "invalid_input", "text"),
    ("POST", "/v1/channels/support/messages", {"user": "alice", "text": ""}, 422, "invalid_input", "text"),
    ("POST", "/v1/memory/context", {"query": "x"}, 422, "invalid_input", "userId"),
    (
        "POST",
        "/v1/memory/context",
        {"userId": "a", "query": "x", "tokenBudget": "2000"},
        422,
        "invalid_input",
        "tokenBudget",
    ),
    (
        "POST",
        "/v1/memory/context",
        {"userId": "a", "query": "x", "tokenBudget": 0},
        422,
        "invalid_input",
        "tokenBudget",
    ),
    ("POST", "/v1/memory/search", {"query": "", "persona": "fake"}, 422, "invalid_input", "query"),
    ("POST", "/v1/memories", {"persona": "fake", "text": "x", "scope": "planet:mars"}, 422, "invalid_input", "scope"),
    ("DELETE", "/v1/memories/999999", None, 404, "not_found", "id"),
    ("GET", "/v1/budget?persona=fake", None, 422, "invalid_input", "channel"),
    ("GET", "/v1/nowhere", None, 404, "not_found", None),
]


def test_bad_input_is_a_4xx_naming_the_field_and_nothing_is_stored(daemons, fake_openai) -> None:
    other = fake_persona(fake_openai.url, "other")
    d = daemons(
        BOUND + "[daemon]\nmax_body_bytes = 65536\n", personas={"fake": fake_persona(fake_openai.url), "other": other}
    )
    for method, path, body, status, code, field in BAD_REQUESTS:
        if isinstance(body, bytes):
            response = d.client.request(method, path, content=body, headers={"content-type": "application/json"})
        else:
            response = d.client.request(method, path, json=body)
        assert response.status_code == status, (path, body, response.text)
        error = response.json()["error"]
        assert (error["code"], error["field"]) == (code, field), (path, body, error)
        assert error["message"]
    # Oversized bodies: by Content-Length, and chunked without one.
    huge = {**CHAT_OK, "message": "x" * 70_000}
    response = d.client.post("/v1/chat", json=huge)
    assert response.status_code == 413
    assert response.json()["error"]["field"] == "body"
    assert "65536" in response.json()["error"]["message"]

    def chunks() -> Any:
        for _ in range(20):
            yield b"x" * 8192

    response = d.client.post("/v1/chat", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    response = d.client.get("/v1/channels/support/events", headers={"Last-Event-ID": "abc"})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "Last-Event-ID"
    # Nothing was half-written, and the daemon still serves.
    with d.app.store.read() as conn:
        assert d.app.store.messages.after(conn, "general", 0) == []
        assert d.app.store.messages.after(conn, "support", 0) == []
    assert d.chat("still there?")[-1].event == "done"


# -- auth ---------------------------------------------------------------------------------------------


def test_with_an_api_key_every_endpoint_but_health_needs_it(daemons) -> None:
    d = daemons('[daemon]\napi_key = "s3cret"\n')
    assert d.client.get("/healthz").status_code == 200
    for method, path in [
        ("GET", "/v1/personas"),
        ("POST", "/v1/chat"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("POST", "/v1/memory/context"),
        ("GET", "/v1/channels/general/events"),
    ]:
        response = d.client.request(method, path, json=CHAT_OK)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert d.client.get("/v1/personas", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert d.client.get("/v1/personas", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert d.client.get("/v1/personas", headers={"X-API-Key": "s3cret"}).status_code == 200
    schema = d.client.get("/openapi.json", headers={"X-API-Key": "s3cret"}).json()
    assert {"/v1/chat", "/v1/memory/context", "/v1/channels/{channel}/events"} <= set(schema["paths"])
    # Wherever a request names a persona, the daemon's own are the examples.
    bodies = schema["components"]["schemas"]
    assert bodies["ChatRequest"]["properties"]["persona"]["examples"] == ["fake"]
    assert bodies["ChatCompletionRequest"]["properties"]["model"]["examples"] == ["fake"]
    (model,) = schema["paths"]["/v1/models/{model}"]["get"]["parameters"]
    assert model["schema"]["examples"] == ["fake"]
    assert "403" in schema["paths"]["/v1/chat"]["post"]["responses"]  # a channel the key may not use
    # Where some valid key's role is refused, 403 is declared (in OpenAI's shape on its routes).
    responses = {(m, p): op["responses"] for p, item in schema["paths"].items() for m, op in item.items()}
    assert "403" in responses[("get", "/v1/memories")]
    assert "403" in responses[("post", "/v1/memory/search")]
    assert "403" not in responses[("get", "/v1/personas")]
    assert "403" not in responses[("get", "/healthz")]
    openai_403 = responses[("post", "/v1/chat/completions")]["403"]["content"]["application/json"]["schema"]
    assert openai_403["$ref"].endswith("/OpenAIErrorResponse")
    with d.app.store.read() as conn:  # the refused chat stored nothing
        assert d.app.store.messages.after(conn, "general", 0) == []


def test_binding_beyond_loopback_without_a_key_is_refused(tmp_path) -> None:
    cfg = load_config(write_home(tmp_path), environ={})
    app = App(cfg)
    try:
        for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
            with pytest.raises(ConfigError, match="api_key"):
                DaemonServer(app, host, 0)
    finally:
        app.close()


def test_a_channel_bound_to_an_unknown_persona_fails_at_start(tmp_path) -> None:
    cfg = load_config(write_home(tmp_path, '[channels.support]\npersonas = ["ghost"]\n'), environ={})
    app = App(cfg)
    try:
        with pytest.raises(ConfigError, match="channels.support.personas: unknown persona 'ghost'"):
            DaemonServer(app, "127.0.0.1", 0)
    finally:
        app.close()


def test_health_and_personas(daemons) -> None:
    d = daemons(BOUND)
    health = d.client.get("/healthz").json()
    assert health["status"] == "ok"
    personas = d.client.get("/v1/personas").json()
    assert [p["name"] for p in personas["personas"]] == ["fake"]
    assert personas["personas"][0]["model"] == "openai/fake-model"
    assert personas["channel_bindings"] == {"support": ["fake"]}
