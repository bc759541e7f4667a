"""``/mcp`` on a real daemon over real HTTP, driven by the ``mcp`` SDK's own Streamable HTTP client:
the daemon's keys and roles decide who may call which tool, a missing key is a 401, a role that
may not do something gets a tool error with the catalogue's code (never an HTTP 500), and the
session's persona and user come from the query string or, the same, from headers."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agentd.access.scopes import Scope
from agentd.api.keys import KeyBook
from tests.support import Running


def payload(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.content[0], types.TextContent)
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


def over_http(
    url: str, token: str | None, session: Callable[[Client], Awaitable[None]], headers: dict[str, str] | None = None
) -> None:
    """Run ``session`` with an SDK client of ``url`` (the key as a bearer token, and ``headers``)."""
    sent = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(streamable_http_client(url, http_client=create_mcp_http_client(headers=sent))) as client:
                await session(client)

    anyio.run(main)


def keys(d: Running) -> dict[str, str]:
    book = KeyBook(d.app.store)
    return {
        "admin": book.create("admin", "ops").token,
        "adapter": book.create("adapter", "irc", ["irc-*"]).token,
        "service": book.create("service", "crm").token,
    }


def test_mcp_on_the_daemon_takes_its_keys_and_roles(daemons: Callable[..., Running]) -> None:
    d = daemons()
    token = keys(d)
    url = f"{d.url}/mcp?persona=fake&user=alice"

    # No key, or a wrong one: 401, before anything MCP.
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in ({}, {"Authorization": "Bearer agentd_wrong"}):
        refused = httpx.post(url, json=initialize, headers={**accept, **headers}, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthorized"

    results: dict[str, Any] = {}

    async def as_admin(client: Client) -> None:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} >= {"remember", "recall", "chat"}
        results["stored"] = payload(await client.call_tool("remember", {"text": "Alice's dog is called Rex"}))
        results["found"] = payload(await client.call_tool("recall", {"query": "what is the dog's name?"}))

    over_http(url, token["admin"], as_admin)
    assert results["stored"]["memory"]["scope"] == "user:alice"
    assert results["found"]["results"][0]["text"] == "Alice's dog is called Rex"

    async def as_service(client: Client) -> None:
        found = await client.call_tool("recall", {"query": "dog's name"})
        assert not found.is_error
        assert payload(found)["results"][0]["text"] == "Alice's dog is called Rex"
        context = payload(await client.call_tool("memory_context", {"query": "dog's name"}))
        assert context["context"].startswith("## Known Facts (from memory)\n- Alice's dog is called Rex")
        for name, arguments in [
            ("remember", {"text": "Services store nothing"}),
            ("forget", {"id": 1}),
            ("list_memories", {}),
            ("chat", {"message": "hello", "channel": "irc-lobby"}),
        ]:
            refused = await client.call_tool(name, arguments)
            assert refused.is_error, name
            error = payload(refused)["error"]
            assert error["code"] == "forbidden", error
            assert "service key 'crm'" in error["message"], error

    over_http(url, token["service"], as_service)

    async def as_adapter(client: Client) -> None:
        refused = await client.call_tool("recall", {"query": "dog"})
        assert refused.is_error
        assert payload(refused)["error"]["code"] == "forbidden"
        elsewhere = await client.call_tool("chat", {"message": "hello", "channel": "general"})
        assert elsewhere.is_error
        assert payload(elsewhere)["error"]["code"] == "forbidden"
        delegation = await client.call_tool("chat", {"message": "hello", "channel": "irc-lobby~fake"})
        assert delegation.is_error
        assert payload(delegation)["error"]["code"] == "forbidden"
        inside = await client.call_tool("chat", {"message": "hello there", "channel": "irc-lobby"})
        assert not inside.is_error, inside
        results["chat"] = payload(inside)

    over_http(f"{d.url}/mcp?persona=fake&user=irc:alice", token["adapter"], as_adapter)
    assert results["chat"]["reply"] == "echo: hello there"
    assert results["chat"]["channel"] == "irc-lobby"
    d.client.headers["Authorization"] = f"Bearer {token['admin']}"
    stored = d.messages("irc-lobby")
    assert [(m["role"], m["content"]) for m in stored] == [("user", "hello there"), ("assistant", "echo: hello there")]


def test_the_session_may_come_as_headers_and_users_see_only_their_own(daemons: Callable[..., Running]) -> None:
    """``X-Agentd-Persona`` and ``X-Agentd-User`` say what the query string would; bob's session
    does not see alice's memories, alice's does."""
    d = daemons()
    d.app.memory.add("fake", Scope.user("alice"), "Alice's locker code is 4711", "fact")
    seen: dict[str, list[str]] = {}

    def as_user(user: str) -> Callable[[Client], Awaitable[None]]:
        async def session(client: Client) -> None:
            found = payload(await client.call_tool("recall", {"query": "locker code", "limit": 10}))
            seen[user] = [r["text"] for r in found["results"]]

        return session

    for user in ("alice", "bob"):
        over_http(f"{d.url}/mcp", None, as_user(user), {"X-Agentd-Persona": "fake", "X-Agentd-User": user})
    assert seen == {"alice": ["Alice's locker code is 4711"], "bob": []}
