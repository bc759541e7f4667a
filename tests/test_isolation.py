"""Adversarial isolation: alice's secrets reach no one else, by any path.

alice has four secrets: one user memory learned in her direct channel (``dm-alice``),
one learned in the shared channel ``lobby``, one an operator stored in her user scope,
and one stored in the scope of her direct channel. bob, an adapter key for other
channels, a service key, followers of every feed, automatic retrieval, ``recall``,
delegation and the CLI all try to see them. Every place one shows up is counted by
path; the test asserts 0 and names the path if one appears.

The positive controls (alice's own stream sees her secrets; the lobby sees what was
learned in the lobby) show that each secret was findable, so a 0 means something.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agentd.access.scopes import Scope
from agentd.api.keys import KeyBook
from agentd.prompt.builder import NO_REPLY
from tests.conftest import agentd_cli
from tests.support import SSE, Running, follow, read_sse, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona

DM = "Alice locker code is DMSECRET7731"
LOBBY = "Alice favourite locker snack is LOBBYUSER3301"
OPERATOR = "Alice passport locker number is OPSECRET5512"
CHANNEL = "The dm-alice locker note is CHANSECRET9090"
SECRETS = {"dm": "DMSECRET7731", "lobby": "LOBBYUSER3301", "operator": "OPSECRET5512", "channel": "CHANSECRET9090"}
ABOUT_ME = "what do you know about me?"
ASK = "tell me the locker code, passport locker number and locker note"


def _personas(fake: FakeOpenAI) -> dict[str, str]:
    return {
        "fake": fake_persona(fake.url, "fake", '["remember", "recall", "delegate"]'),
        "helper": fake_persona(fake.url, "helper", '["remember", "recall"]'),
    }


def _found(text: str, allowed: tuple[str, ...] = ()) -> list[str]:
    return [name for name, mark in SECRETS.items() if mark in text and name not in allowed]


def _chat(d: Running, headers: dict[str, str], **body: Any) -> list[SSE]:
    body = {"persona": "fake", "user": "alice", **body}
    with d.client.stream("POST", "/v1/chat", json=body, headers=headers) as response:
        assert response.status_code == 200, response.read()
        return list(read_sse(response.iter_lines()))


def _requests_text(fake: FakeOpenAI, since: int) -> str:
    return json.dumps(fake.chat_requests()[since:])


def test_alices_secrets_reach_no_one_else_by_any_path(daemons, fake_openai: FakeOpenAI) -> None:
    d = daemons(personas=_personas(fake_openai))
    book = KeyBook(d.app.store)
    admin = {"Authorization": f"Bearer {book.create('admin', 'ops').token}"}
    lobby_adapter = {
        "Authorization": f"Bearer {book.create('adapter', 'lobby-bridge', ['lobby', 'dm-*'], ['web:*']).token}"
    }
    other = {"Authorization": f"Bearer {book.create('adapter', 'other', ['irc-*']).token}"}
    service = {"Authorization": f"Bearer {book.create('service', 'crm').token}"}
    leaks: Counter[str] = Counter()

    def count(path: str, text: str, allowed: tuple[str, ...] = ()) -> None:
        for name in _found(text, allowed):
            leaks[f"{path}: {name}"] += 1

    # Followers of every feed, from before the first word.
    followers = {ch: follow(d.client, ch, headers=lobby_adapter)[0] for ch in ("lobby", "dm-alice", "dm-bob")}
    for f in followers.values():
        wait_for(f.ready.is_set, 30, "a follower")

    # alice's secrets: learned in her direct channel (both personas), in the lobby, and stored by an operator.
    for persona in ("fake", "helper"):
        fake_openai.queue(Turn(tool_calls=[("remember", {"text": DM, "scope": "user"})]), Turn(text="Noted."))
        _chat(d, admin, persona=persona, channel="dm-alice", message="please keep this in mind", visibility="direct")
    fake_openai.queue(Turn(tool_calls=[("remember", {"text": LOBBY})]), Turn(text="Noted."))
    _chat(d, admin, channel="lobby", message="keep this one too")
    for persona in ("fake", "helper"):
        stored = [
            {"persona": persona, "text": OPERATOR, "userId": "alice"},
            {"persona": persona, "text": CHANNEL, "channel": "dm-alice"},
        ]
        for memory in stored:
            assert d.client.post("/v1/memories", json=memory, headers=admin).status_code == 201

    # Positive control: alice's own stream in her direct channel gets her memories whole.
    own = _chat(d, admin, channel="dm-alice", message=ABOUT_ME)
    own_text = json.dumps(own[0].data)
    assert own[0].event == "memory_context"
    assert SECRETS["dm"] in own_text
    assert SECRETS["operator"] in own_text

    # alice in the shared lobby: automatic retrieval, then recall, then delegation.
    before = len(fake_openai.chat_requests())
    lobby_turn = _chat(d, admin, channel="lobby", message=ABOUT_ME)
    prompt = _requests_text(fake_openai, before)
    assert SECRETS["lobby"] in prompt, "what alice said in the lobby is recalled there (positive control)"
    count("automatic retrieval in a shared channel", prompt, allowed=("lobby",))
    count("alice's own stream in a shared channel", json.dumps([e.data for e in lobby_turn]), allowed=("lobby",))

    before = len(fake_openai.chat_requests())
    fake_openai.queue(Turn(tool_calls=[("recall", {"query": ASK, "limit": 50})]), Turn(text="Here you go."))
    _chat(d, admin, channel="lobby", message=ASK)
    count("recall in a shared channel", _requests_text(fake_openai, before), allowed=("lobby",))

    before = len(fake_openai.chat_requests())
    fake_openai.queue(
        Turn(tool_calls=[("delegate", {"persona": "helper", "task": ASK})]),
        Turn(tool_calls=[("recall", {"query": ASK, "limit": 50})]),
        Turn(text="The helper found nothing private."),
        Turn(text="Done."),
    )
    _chat(d, admin, channel="lobby", message="ask the helper about my locker")
    count("delegation from a shared channel", _requests_text(fake_openai, before), allowed=("lobby",))

    # bob, in the lobby and in his own direct channel: automatic retrieval, recall, the OpenAI endpoint.
    before = len(fake_openai.chat_requests())
    for channel in ("lobby", "dm-bob"):
        _chat(d, admin, user="bob", channel=channel, message=f"what do you know about alice? {ASK}")
        fake_openai.queue(Turn(tool_calls=[("recall", {"query": ASK, "limit": 50})]), Turn(text="ok"))
        _chat(d, admin, user="bob", channel=channel, message=ASK)
    completion = {"model": "fake", "user": "bob", "messages": [{"role": "user", "content": ASK}]}
    answer = d.client.post("/v1/chat/completions", json=completion, headers=admin)
    assert answer.status_code == 200
    count("bob through the OpenAI endpoint", answer.text)
    count("bob's prompts", _requests_text(fake_openai, before))

    # The adapter key for other channels and the service key try every route about alice.
    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/memories", {"params": {"persona": "fake", "scope": "user:alice"}}),
        ("GET", "/v1/memories", {"params": {"persona": "fake"}}),
        ("DELETE", "/v1/memories/1", {}),
        ("POST", "/v1/memories", {"json": {"persona": "fake", "text": "planted", "userId": "alice"}}),
        ("POST", "/v1/memory/search", {"json": {"query": ASK, "userId": "alice"}}),
        ("POST", "/v1/memory/context", {"json": {"query": ASK, "userId": "alice"}}),
        ("GET", "/v1/budget", {"params": {"persona": "fake", "channel": "dm-alice", "user": "alice", "message": ASK}}),
        ("GET", "/v1/channels/dm-alice/messages", {}),
        ("GET", "/v1/channels/lobby/messages", {}),
        ("POST", "/v1/channels/dm-alice/messages", {"json": {"user": "alice", "text": ABOUT_ME, "persona": "fake"}}),
        (
            "POST",
            "/v1/chat",
            {"json": {"persona": "fake", "channel": "dm-alice", "user": "alice", "message": ABOUT_ME}},
        ),
        ("POST", "/v1/chat/completions", {"json": {**completion, "user": "alice"}}),
        (
            "POST",
            "/v1/channels/lobby~helper/messages",
            {"json": {"user": "mallory", "text": "plant", "persona": "helper"}},
        ),
    ]
    for who, headers in (("adapter for other channels", other), ("service key", service)):
        for method, path, kwargs in attempts:
            if who == "service key" and path.startswith("/v1/memory/"):
                continue  # a service key's job: any user's memories, read-only (the service role)
            response = d.client.request(method, path, headers=headers, **kwargs)
            count(f"{who} {method} {path}", response.text)
            if response.status_code != 403:
                leaks[f"{who} {method} {path}: answered {response.status_code}, not 403"] += 1
        for channel in ("dm-alice", "lobby", "lobby~helper"):
            with d.client.stream("GET", f"/v1/channels/{channel}/events", headers=headers) as response:
                if response.status_code != 403:
                    leaks[f"{who} follows {channel}: answered {response.status_code}"] += 1

    # The feeds: everything their followers received, after alice's last turn.
    last = [e for e in lobby_turn if e.event == "done"][0].data["message_id"]
    wait_for(lambda: any(e.data.get("id") == last for e in followers["lobby"].snapshot()), 30, "the lobby feed")
    for channel, follower in followers.items():
        count(f"feed of {channel}", json.dumps([e.data for e in follower.snapshot()]))
    assert any(e.event == "memory_context" for e in followers["dm-alice"].snapshot())

    # The CLI: budgets for bob and for alice in the lobby; inspect says why the rest was not eligible.
    for user, allowed in (("bob", ()), ("alice", ("lobby",))):
        shown = agentd_cli(
            "budget", "fake", "--channel", "lobby", "--user", user, "--message", ASK, "--json", config=d.home
        )
        assert shown.returncode == 0, shown.stderr
        count(f"agentd budget --user {user} in the lobby", shown.stdout, allowed)
    for channel in ("lobby", "dm-bob"):
        searched = agentd_cli(
            "memory",
            "search",
            ASK,
            "--persona",
            "fake",
            "--user",
            "bob",
            "--channel",
            channel,
            "--min-score",
            "0",
            "--json",
            config=d.home,
        )
        assert searched.returncode == 0, searched.stderr
        count(f"agentd memory search --user bob --channel {channel}", searched.stdout)
    reply = [e for e in lobby_turn if e.event == "done"][0].data["message_id"]
    assert not leaks, "leaks:\n" + "\n".join(f"{path}: {n}" for path, n in sorted(leaks.items()))
    inspected = agentd_cli("inspect", str(reply), config=d.home)
    assert "shared" in inspected.stdout
    assert "not eligible" in inspected.stdout
    assert "#dm-alice" in inspected.stdout
    assert "added by an operator" in inspected.stdout


def test_a_direct_channel_is_direct_for_its_user_only(daemons, fake_openai: FakeOpenAI) -> None:
    """bob posting in alice's direct channel is not alice: her user memories never reach his turns there."""
    d = daemons(personas=_personas(fake_openai))
    fake_openai.queue(Turn(tool_calls=[("remember", {"text": DM, "scope": "user"})]), Turn(text="Noted."))
    _chat(d, {}, channel="dm-alice", message="please keep this in mind", visibility="direct")
    before = len(fake_openai.chat_requests())
    fake_openai.queue(Turn(tool_calls=[("recall", {"query": ASK, "limit": 50})]), Turn(text="ok"))
    _chat(d, {}, user="bob", channel="dm-alice", message=ASK, visibility="shared")  # too late: declared direct
    assert _found(_requests_text(fake_openai, before)) == []
    # ...while alice in her own channel recalls it, her message unmarked (only she speaks there).
    before = len(fake_openai.chat_requests())
    _chat(d, {}, channel="dm-alice", message=ABOUT_ME)
    request = fake_openai.chat_requests()[before]
    assert SECRETS["dm"] in json.dumps(request)
    assert request["messages"][-1]["content"] == ABOUT_ME


def test_a_channel_named_for_a_user_is_their_direct_channel_undeclared(daemons, fake_openai: FakeOpenAI) -> None:
    """``dm-alice`` with nothing declared is alice's direct channel by its name: what an operator stored
    for her is recalled there, for her; bob posting there is not alice, and gets none of it."""
    d = daemons(personas=_personas(fake_openai))
    d.app.memory.add("fake", Scope.user("alice"), OPERATOR, "fact")
    own = _chat(d, {}, channel="dm-alice", message=ABOUT_ME)
    assert own[0].event == "memory_context"
    assert SECRETS["operator"] in json.dumps(own[0].data)
    before = len(fake_openai.chat_requests())
    fake_openai.queue(Turn(tool_calls=[("recall", {"query": ASK, "limit": 50})]), Turn(text="ok"))
    bobs = _chat(d, {}, user="bob", channel="dm-alice", message=ASK)
    _chat(d, {}, user="bob", channel="dm-alice", message=ABOUT_ME)
    assert _found(_requests_text(fake_openai, before) + json.dumps([e.data for e in bobs])) == []
    # A name that is not the user's own (dm-alice-2) stays shared for her.
    elsewhere = _chat(d, {}, channel="dm-alice-2", message=ABOUT_ME)
    assert SECRETS["operator"] not in json.dumps([e.data for e in elsewhere])


def test_shared_history_names_its_speakers_and_a_failed_turn_leaves_no_two_user_turns(
    daemons, fake_openai: FakeOpenAI
) -> None:
    d = daemons(personas=_personas(fake_openai))
    _chat(d, {}, channel="lobby", message="hello from alice")
    fake_openai.queue(Turn(status=400))  # bob's turn fails: his message stays without a reply
    with d.client.stream(
        "POST", "/v1/chat", json={"persona": "fake", "channel": "lobby", "user": "bob", "message": "hi from bob"}
    ) as response:
        events = list(read_sse(response.iter_lines()))
    assert events[-1].event == "error"
    before = len(fake_openai.chat_requests())
    _chat(d, {}, channel="lobby", message="and alice again")
    messages = fake_openai.chat_requests()[before]["messages"]
    talk = [(m["role"], m["content"]) for m in messages if m["role"] != "system"]
    assert talk == [
        ("user", "alice: hello from alice"),
        ("assistant", "echo: hello from alice"),
        ("user", "bob: hi from bob"),
        ("assistant", NO_REPLY),
        ("user", "alice: and alice again"),
    ]
    # Alone in a channel, nobody needs naming.
    before = len(fake_openai.chat_requests())
    _chat(d, {}, channel="quiet", message="just me")
    _chat(d, {}, channel="quiet", message="still me")
    talk = [(m["role"], m["content"]) for m in fake_openai.chat_requests()[-1]["messages"] if m["role"] != "system"]
    assert talk == [("user", "just me"), ("assistant", "echo: just me"), ("user", "still me")]
    assert len(fake_openai.chat_requests()) == before + 2


def test_a_feed_follower_sees_the_count_and_relevance_of_user_memories_not_their_text(
    daemons, fake_openai: FakeOpenAI
) -> None:
    d = daemons(personas=_personas(fake_openai))
    d.app.memory.add("fake", Scope.user("alice"), DM, "fact")
    follower, _thread = follow(d.client, "dm-alice")
    wait_for(follower.ready.is_set, 30, "the follower")
    own = _chat(d, {}, channel="dm-alice", message=ABOUT_ME, visibility="direct")
    assert own[0].data["memories"][0]["text"] == DM
    seen = wait_for(
        lambda: [e for e in follower.snapshot() if e.event == "memory_context"], 30, "the feed's memory_context"
    )
    shown = seen[0].data["memories"]
    assert len(shown) == 1
    assert shown[0]["withheld"] is True
    assert shown[0]["scope"] == "user"
    assert "text" not in shown[0]
    assert shown[0]["relevance"] == own[0].data["memories"][0]["relevance"]
