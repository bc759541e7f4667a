"""Identifiers refuse what cannot be seen: ``alice\\u200b`` is not a second alice.

Users, channels and personas holding a zero-width, bidirectional, format or control
character are refused with 422 naming the field, by every way in: the JSON bodies,
a channel in the path, the OpenAI route (its 400, as OpenAI answers bad input), MCP's
``chat`` and the key's users; format characters beyond the Basic Multilingual Plane
(tags) too.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from agentd._exceptions import InvalidInput
from agentd.access.scopes import check_identifier
from tests.support import Running

#: Zero-width space and joiner, direction marks, an override, an isolate, the BOM, a bell, DEL, a tag.
UNSEEN = ["\u200b", "\u200d", "\u200e", "\u202e", "\u2067", "\ufeff", "\x07", "\x7f", "\U000e0041", "\u061c"]


@pytest.mark.parametrize("char", UNSEEN)
def test_check_identifier_names_the_character(char: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_identifier("user", f"alice{char}")
    assert caught.value.field == "user"
    assert f"U+{ord(char):04X}" in caught.value.message
    assert check_identifier("user", "алиса:é") == "алиса:é"  # letters of any script stay welcome


def _refused(answer, field: str, status: int = 422) -> None:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error.get("field", error.get("param")) == field, error
    assert "invisible" in error["message"] or "control" in error["message"], error


def test_every_way_in_refuses_unseen_characters_naming_the_field(daemons) -> None:
    d: Running = daemons()
    chat = {"persona": "fake", "channel": "general", "user": "alice", "message": "hi"}
    for char in ("\u200b", "\u202e", "\x07", "\U000e0041"):
        _refused(d.client.post("/v1/chat", json={**chat, "user": f"alice{char}"}), "user")
        _refused(d.client.post("/v1/chat", json={**chat, "channel": f"general{char}"}), "channel")
        post = {"user": f"alice{char}", "text": "hi", "persona": "fake"}
        _refused(d.client.post("/v1/channels/general/messages", json=post), "user")
        _refused(d.client.post(f"/v1/channels/{quote('gen' + char)}/messages", json={**post, "user": "a"}), "channel")
        completion = {"model": "fake", "user": f"alice{char}", "messages": [{"role": "user", "content": "hi"}]}
        _refused(d.client.post("/v1/chat/completions", json=completion), "user", 400)
        _refused(
            d.client.post("/v1/chat/completions", json={**completion, "user": "a", "model": f"fake{char}"}),
            "model",
            400,
        )
    _refused(d.client.post("/v1/chat", json={**chat, "persona": "fake\u200d"}), "persona")
    search = {"query": "anything", "userId": "alice\u2066"}
    _refused(d.client.post("/v1/memory/search", json=search), "userId")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "chat", "arguments": {"message": "hi", "channel": "general"}},
    }
    answer = d.client.post(
        f"/mcp?user={quote('alice' + chr(0x200B))}",
        json=call,
        headers={"Accept": "application/json, text/event-stream"},
    )
    result = answer.json()["result"]
    assert result["isError"]
    error = json.loads(result["content"][0]["text"])["error"]
    assert (error["code"], error["field"]) == ("invalid_input", "user")
    # Nothing was stored under a look-alike.
    assert [m["author"] for m in d.messages("general")] == []


def test_a_look_alike_stored_before_can_still_be_erased(tmp_path) -> None:
    """Ids with such characters were accepted before: their people keep the right to be forgotten."""
    from agentd.store import Store
    from tests.conftest import agentd_cli, write_home

    home = write_home(tmp_path / "home")
    store = Store.open(f"sqlite:///{home.parent / 'agentd.db'}")
    with store.write() as conn:
        store.messages.add(
            conn,
            channel="general",
            role="user",
            author="alice\u200b",
            content="a look-alike wrote this",
            status="complete",
        )
    store.close()
    forgotten = agentd_cli("user", "forget", "alice\u200b", "--yes", "--json", config=home)
    assert forgotten.returncode == 0, forgotten.stderr
    assert json.loads(forgotten.stdout)["messages"] == 1
    assert agentd_cli("user", "forget", "", "--yes", config=home).returncode != 0
