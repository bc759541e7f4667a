"""The OpenAI-compatible API, driven by the official ``openai`` package against a real
daemon (uvicorn on loopback, the real runtime and embedder, litellm talking to the
fake OpenAI server behind the persona)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from agentd.access.scopes import Scope
from tests.conftest import agentd_cli
from tests.support import Running
from tests.support.fakeopenai import Turn, fake_persona


def sdk(d: Running, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{d.url}/v1", api_key=key, max_retries=0, timeout=60)


def extra(obj: Any) -> dict[str, Any]:
    """The ``agentd`` extension field that plain clients ignore."""
    return (obj.model_extra or {})["agentd"]  # type: ignore[no-any-return]


def test_non_streaming_goes_through_the_runtime_with_memory_and_inspect(daemons, fake_openai) -> None:
    d = daemons()
    d.app.memory.add("fake", Scope.user("alice"), "User's favorite color is blue", "preference")
    fake_openai.queue(Turn(text="Blue, as you told me."))
    reply = sdk(d).chat.completions.create(
        model="fake", user="alice", messages=[{"role": "user", "content": "What is my favorite color?"}]
    )
    assert reply.object == "chat.completion"
    assert reply.model == "fake"
    assert reply.choices[0].message.content == "Blue, as you told me."
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.total_tokens > 0
    ext = extra(reply)
    assert ext["channel"] == "dm-alice"
    assert ext["user"] == "alice"
    assert ext["memory_status"] == "ok"
    assert [m["text"] for m in ext["memories"]] == ["User's favorite color is blue"]
    assert ext["memories"][0]["score"] >= 0.5
    assert ext["budget"]["total_tokens"] > 0
    # The prompt the persona's model got carries the recalled memory.
    prompt = fake_openai.chat_requests()[-1]["messages"]
    assert any("favorite color is blue" in str(m["content"]) for m in prompt)
    stored = d.messages("dm-alice")
    assert [(m["role"], m["author"], m["content"]) for m in stored] == [
        ("user", "alice", "What is my favorite color?"),
        ("assistant", "fake", "Blue, as you told me."),
    ]
    assert stored[1]["id"] == ext["message_id"]
    assert stored[0]["source"] == "openai"
    shown = agentd_cli("inspect", str(ext["message_id"]), "--json", config=d.home)
    assert shown.returncode == 0, shown.stderr
    assert "favorite color is blue" in shown.stdout


def test_streaming_sends_what_was_recalled_on_the_first_chunk(daemons, fake_openai) -> None:
    d = daemons()
    d.app.memory.add("fake", Scope.user("bob"), "Bob is allergic to peanuts", "health")
    fake_openai.queue(Turn(text="No peanuts for you, Bob."))
    stream = sdk(d).chat.completions.create(
        model="fake",
        user="bob",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": "Can I eat peanuts?"}],
        metadata={"channel": "kitchen", "visibility": "direct"},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    first = chunks[0]
    assert first.choices[0].delta.role == "assistant"
    assert [m["text"] for m in extra(first)["memories"]] == ["Bob is allergic to peanuts"]
    assert extra(first)["channel"] == "kitchen"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "No peanuts for you, Bob."
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1
    assert finish[0].choices[0].finish_reason == "stop"
    assert extra(finish[0])["message_id"] > 0
    assert extra(finish[0])["budget"]["memory_tokens"] > 0
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
    assert [m["content"] for m in d.messages("kitchen")] == ["Can I eat peanuts?", "No peanuts for you, Bob."]


def test_earlier_messages_are_reconciled_with_the_stored_history(daemons, fake_openai) -> None:
    d = daemons()
    client = sdk(d)
    first = client.chat.completions.create(model="fake", user="cy", messages=[{"role": "user", "content": "hello"}])
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first.choices[0].message.content},
    ]
    second = client.chat.completions.create(
        model="fake", user="cy", messages=[*history, {"role": "user", "content": "again"}]
    )
    assert second.choices[0].message.content == "echo: again"
    assert extra(second)["imported"] == 0
    # The client resent the conversation: nothing is stored twice.
    assert [m["content"] for m in d.messages("dm-cy")] == ["hello", "echo: hello", "again", "echo: again"]
    # A conversation begun elsewhere: what agentd lacks is stored as history, once, before the new message.
    elsewhere = [
        {"role": "user", "content": [{"type": "text", "text": "My dog is Rex."}]},
        {"role": "assistant", "content": "Nice name."},
        {"role": "user", "content": "What is my dog called?"},
    ]
    third = client.chat.completions.create(model="fake", user="cy", messages=elsewhere, metadata={"channel": "pets"})
    assert extra(third)["imported"] == 2
    stored = d.messages("pets")
    assert [(m["role"], m["content"], m["source"]) for m in stored] == [
        ("user", "My dog is Rex.", "imported"),
        ("assistant", "Nice name.", "imported"),
        ("user", "What is my dog called?", "openai"),
        ("assistant", "echo: What is my dog called?", "reply"),
    ]
    prompt = [m["content"] for m in fake_openai.chat_requests()[-1]["messages"]]
    assert "My dog is Rex." in prompt
    assert "Nice name." in prompt
    again = client.chat.completions.create(
        model="fake",
        user="cy",
        metadata={"channel": "pets"},
        messages=[
            *elsewhere,
            {"role": "assistant", "content": "echo: What is my dog called?"},
            {"role": "user", "content": "ok"},
        ],
    )
    assert extra(again)["imported"] == 0
    assert len(d.messages("pets")) == 6


def test_tool_choice_none_answers_without_the_personas_tools(daemons, fake_openai) -> None:
    d = daemons()
    client = sdk(d)
    client.chat.completions.create(model="fake", user="dee", messages=[{"role": "user", "content": "with tools"}])
    assert {t["function"]["name"] for t in fake_openai.chat_requests()[-1]["tools"]} == {"remember", "recall"}
    off = client.chat.completions.create(
        model="fake", user="dee", tool_choice="none", messages=[{"role": "user", "content": "without tools"}]
    )
    assert off.choices[0].message.content == "echo: without tools"
    assert not fake_openai.chat_requests()[-1].get("tools")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="fake",
            user="dee",
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        )
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "tools"
    assert "run inside agentd" in refused.value.body["message"]


def test_unknown_persona_and_bad_input_use_openais_error_shape(daemons, fake_openai) -> None:
    d = daemons()
    client = sdk(d)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body == {
        "message": "unknown model 'nobody'; known models (personas): fake",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nobody")
    with pytest.raises(openai.BadRequestError) as last:
        client.chat.completions.create(model="fake", messages=[{"role": "assistant", "content": "hi"}])
    assert last.value.body["param"] == "messages[0].role"
    assert last.value.body["type"] == "invalid_request_error"
    for body, param in [
        ({"model": "fake", "messages": [{"content": "hi"}]}, "messages.0.role"),  # a role is required
        ({"model": "fake", "messages": [{"role": "user", "content": "hi"}], "stream": 0}, "stream"),  # not a boolean
    ]:
        refused = d.client.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == param, refused.text
    response = d.client.post("/v1/chat/completions", json={"model": "fake"})
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.json()["error"]["param"] == "messages"
    # Other routes keep agentd's own shape.
    assert set(d.client.get("/v1/memories", params={"persona": "nobody"}).json()["error"]) == {
        "code",
        "field",
        "message",
    }
    assert d.messages("dm-anonymous") == []


def test_models_list_the_personas_and_bearer_auth_is_required(daemons, fake_openai) -> None:
    d = daemons(
        '[daemon]\napi_key = "s3cret"\n',
        personas={"fake": fake_persona(fake_openai.url), "other": fake_persona(fake_openai.url, "other")},
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk(d, "wrong").models.list()
    assert refused.value.body["code"] == "invalid_api_key"
    assert refused.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        sdk(d, "wrong").chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])
    client = sdk(d, "s3cret")
    assert sorted(m.id for m in client.models.list()) == ["fake", "other"]
    assert client.models.retrieve("other").owned_by == "agentd"
    reply = client.chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}], user="eve")
    assert reply.choices[0].message.content == "echo: hi"
    assert reply.model == "other"


def test_a_client_that_sends_no_user_is_the_default_user_on_a_keyless_daemon(daemons, fake_openai) -> None:
    """One identity: llm or Open WebUI sending no ``user`` to a loopback daemon without keys act as
    the default user ([user] name), as the CLI and the web page do: in their direct channel, with
    their memories."""
    d = daemons('[memory.tuning]\ndecay_weight = 0.0\n[user]\nname = "web"\n')
    d.app.memory.add("fake", Scope.user("web"), "The user's favorite color is blue", "preference")
    fake_openai.queue(Turn(text="Blue."))
    answer = d.client.post(
        "/v1/chat/completions",
        json={"model": "fake", "messages": [{"role": "user", "content": "What is my favorite color?"}]},
    )
    assert answer.status_code == 200, answer.text
    stored = d.messages("dm-web")
    assert [(m["role"], m["author"]) for m in stored][:1] == [("user", "web")]
    assert answer.json()["agentd"]["user"] == "web"
    assert [m["text"] for m in answer.json()["agentd"]["memories"]] == ["The user's favorite color is blue"]
    assert d.messages("dm-anonymous") == []
