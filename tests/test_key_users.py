"""Keys hold to what they are for: an adapter key acts only for its own network's users.

The hole this closes: a key limited to ``irc-*`` posted as ``alice`` into a new channel
inside its globs, declared it ``direct``, and the turn recalled alice's private memories.
Every way in is tried here (``POST /v1/chat``, ``POST /v1/channels/{c}/messages``,
``/v1/chat/completions`` with ``metadata.channel``, MCP's ``chat`` over ``/mcp``): each is
refused with 403 before anything is stored, and the same key posting as its own user
(``irc:bob``) is let in. An admin key doing what the adapter tried does recall alice's
memory: the positive control that shows the refusal is what keeps it out.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from agentd.access.scopes import Scope
from agentd.api.keys import KeyBook, owned_users
from tests.conftest import agentd_cli, write_home
from tests.support import Running, read_sse

SECRET = "alice-locker-code-4711"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _chat(d: Running, headers: dict[str, str], user: str, channel: str) -> tuple[int, str]:
    body = {"persona": "fake", "channel": channel, "user": user, "message": "what is my locker code?"}
    with d.client.stream("POST", "/v1/chat", json={**body, "visibility": "direct"}, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            return response.status_code, response.text
        return 200, json.dumps([e.data for e in read_sse(response.iter_lines())])


def _mcp_chat(d: Running, headers: dict[str, str], user: str, channel: str) -> dict[str, Any]:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "chat",
            "arguments": {"message": "my locker code?", "channel": channel, "visibility": "direct"},
        },
    }
    answer = d.client.post(
        f"/mcp?persona=fake&user={user}",
        json=call,
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]  # type: ignore[no-any-return]


def test_an_adapter_key_cannot_act_as_another_networks_user_by_any_way_in(daemons) -> None:
    d = daemons()
    d.app.memory.add("fake", Scope.user("alice"), f"Alice's locker code is {SECRET}", "fact")
    book = KeyBook(d.app.store)
    admin = _bearer(book.create("admin", "ops").token)
    irc = _bearer(book.create("adapter", "irc", ["irc-*"]).token)

    # Positive control: posting as alice in a channel declared direct recalls her memory.
    status, seen = _chat(d, admin, "alice", "irc-control")
    assert status == 200
    assert SECRET in seen

    status, refused = _chat(d, irc, "alice", "irc-x")
    assert status == 403, refused
    error = json.loads(refused)["error"]
    assert error["code"] == "forbidden"
    assert "'alice'" in error["message"]
    assert "irc" in error["message"]
    post = {"user": "alice", "text": "my locker code?", "persona": "fake", "visibility": "direct"}
    assert d.client.post("/v1/channels/irc-y/messages", json=post, headers=irc).status_code == 403
    completion = {
        "model": "fake",
        "user": "alice",
        "metadata": {"channel": "irc-z", "visibility": "direct"},
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
        + [{"role": "user", "content": "my locker code?"}],
    }
    answered = d.client.post("/v1/chat/completions", json=completion, headers=irc)
    assert answered.status_code == 403, answered.text
    assert SECRET not in answered.text
    result = _mcp_chat(d, irc, "alice", "irc-w")
    assert result["isError"], result
    assert json.loads(result["content"][0]["text"])["error"]["code"] == "forbidden"
    assert SECRET not in json.dumps(result)

    # Nothing was stored as alice in any of the adapter's channels (the earlier messages included).
    d.client.headers.update(admin)
    assert all(d.messages(c) == [] for c in ("irc-x", "irc-y", "irc-z", "irc-w"))

    # Its own network's users: let in, on every route.
    assert _chat(d, irc, "irc:bob", "irc-x")[0] == 200
    post["user"] = "irc:bob"
    assert d.client.post("/v1/channels/irc-y/messages", json=post, headers=irc).status_code == 202
    completion["user"] = "irc:bob"
    assert d.client.post("/v1/chat/completions", json=completion, headers=irc).status_code == 200
    assert not _mcp_chat(d, irc, "irc:bob", "irc-w")["isError"]


def test_a_key_named_users_and_a_key_whose_globs_name_no_network(daemons) -> None:
    d = daemons()
    book = KeyBook(d.app.store)
    lobby = _bearer(book.create("adapter", "lobby", ["lobby"], ["web:*", "carol"]).token)
    d.client.headers.update(_bearer(book.create("admin", "ops").token))
    for user, status in (("carol", 200), ("web:dave", 200), ("alice", 403), ("irc:bob", 403)):
        assert _chat(d, lobby, user, "lobby")[0] == status, user
    # A key made before keys named their users (NULL): its users come from its channel globs.
    with d.app.store.write() as conn:
        conn.exec_driver_sql("UPDATE api_keys SET users = NULL WHERE name = 'lobby'")
    assert _chat(d, lobby, "carol", "lobby")[0] == 403  # 'lobby' names no network: it acts for no one
    assert owned_users(["irc-*", "dm-irc-*", "matrix-*", "dm-*", "lobby", "*"]) == ("irc:*", "matrix:*")


def test_keys_create_takes_users_and_refuses_an_adapter_key_that_would_act_for_no_one(tmp_path) -> None:
    home = write_home(tmp_path / "home")
    made = agentd_cli("keys", "create", "--role", "adapter", "--channels", "irc-*", "--json", config=home)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["users"] == ["irc:*"]
    named = agentd_cli(
        "keys", "create", "--role", "adapter", "--channels", "lobby", "--users", "web:* carol", "--json", config=home
    )
    assert json.loads(named.stdout)["users"] == ["web:*", "carol"]
    refused = agentd_cli("keys", "create", "--role", "adapter", "--channels", "lobby", config=home)
    assert refused.returncode != 0
    assert "--users" in refused.stderr
    service = agentd_cli("keys", "create", "--role", "service", "--users", "irc:*", config=home)
    assert service.returncode != 0
    assert "only adapter keys" in service.stderr
    listed = agentd_cli("keys", "list", config=home)
    assert "users: irc:*" in listed.stdout
    assert "users: web:*, carol" in listed.stdout
    con = sqlite3.connect(home.parent / "agentd.db")
    assert [json.loads(r[0]) for r in con.execute("SELECT users FROM api_keys ORDER BY id")] == [
        ["irc:*"],
        ["web:*", "carol"],
    ]
    con.close()
