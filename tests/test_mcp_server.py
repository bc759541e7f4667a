"""agentd as an MCP server, as an MCP client sees it: ``agentd mcp`` launched as a subprocess and
driven by the ``mcp`` SDK's own client over stdio, on a store that the test (standing in for a
running daemon) reads and writes at the same time."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

from agentd.access.scopes import GLOBAL, Scope
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from tests.conftest import REPO, write_home

TOOLS = {"remember", "recall", "forget", "memory_context", "list_memories", "chat"}


def agentd_exe() -> str:
    return shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"


def stdio_params(home: Path, *args: str) -> StdioServerParameters:
    """``agentd --config HOME mcp ARGS`` with this environment less ``AGENTD_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    return StdioServerParameters(command=agentd_exe(), args=["--config", str(home), "mcp", *args], env=env, cwd=REPO)


def call(client: Client, name: str, **arguments: Any) -> Awaitable[types.CallToolResult]:
    return client.call_tool(name, arguments)


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The JSON a result carries: its structured content, which its text block repeats."""
    assert isinstance(result.content[0], types.TextContent)
    data = json.loads(result.content[0].text)
    assert data == result.structured_content
    return data  # type: ignore[no-any-return]


def run(session: Callable[[Client], Awaitable[None]], params: StdioServerParameters) -> None:
    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(params) as client:
                await session(client)

    anyio.run(main)


def test_the_tools_over_stdio_follow_the_http_apis_rules(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """The six tools are listed with schemas and descriptions; remember, recall, memory_context,
    list_memories and forget work on the daemon's store, within the session user's reach; bad
    arguments and unknown ids are tool errors with the catalogue's codes."""
    home = write_home(tmp_path)
    app = App(load_config(home, environ={}), embedder=embedder)
    # Stored beforehand by "the daemon": another user's memory, and a global one.
    app.memory.add("buddy", Scope.user("bob"), "Bob's locker code is 4711", "fact")
    app.memory.add("buddy", GLOBAL, "The office closes at six", "fact")

    async def session(client: Client) -> None:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        for tool in listed.tools:
            assert tool.description
            assert len(tool.description) > 30
            assert tool.input_schema["type"] == "object"
            assert tool.input_schema["properties"]

        stored = payload(await call(client, "remember", text="User likes Python", category="preference"))
        assert stored["stored"] is True
        assert stored["memory"]["scope"] == "user:alice"
        again = payload(await call(client, "remember", text="User likes Python", category="preference"))
        assert again["stored"] is False

        # The first-use case, with the recall tool's result shape; bob's memory is not alice's to see.
        found = payload(await call(client, "recall", query="What programming language should I learn?"))
        assert set(found) == {"results", "total_found"}
        assert found["results"][0]["text"] == "User likes Python"
        assert set(found["results"][0]) == {"text", "category", "score", "created_at", "id"}
        assert found["results"][0]["score"] >= 0.5
        locker = payload(await call(client, "recall", query="locker code", limit=10))
        assert all("4711" not in r["text"] for r in locker["results"])
        assert locker["total_found"] == len(locker["results"])

        block = payload(await call(client, "memory_context", query="programming language", tokenBudget=500))
        assert block["context"].startswith("## Known Facts (from memory)\n- User likes Python")
        assert block["memoriesUsed"] >= 1
        assert block["tokenBudget"] == 500

        listing = payload(await call(client, "list_memories", scope="user:alice"))
        assert [m["text"] for m in listing["memories"]] == ["User likes Python"]
        forgotten = payload(await call(client, "forget", id=listing["memories"][0]["id"]))
        assert forgotten["forgotten"]["text"] == "User likes Python"
        gone = payload(await call(client, "recall", query="What programming language should I learn?"))
        assert all(r["text"] != "User likes Python" for r in gone["results"])

        bad: list[tuple[str, dict[str, Any], str, str | None]] = [
            ("recall", {"query": "x", "limit": "many"}, "invalid_input", "limit"),
            ("recall", {"query": "x", "colour": "red"}, "invalid_input", "colour"),
            ("forget", {"id": 999_999}, "not_found", None),
            ("list_memories", {"scope": "somewhere"}, "invalid_input", "scope"),
        ]
        for name, arguments, code, field in bad:
            failed = await client.call_tool(name, arguments)
            assert failed.is_error, (name, arguments)
            error = payload(failed)["error"]
            assert error["code"] == code, error
            assert error.get("field") == field, error

    run(session, stdio_params(home, "--persona", "buddy", "--user", "alice"))
    # What the MCP client stored and forgot is the daemon's store.
    texts = [m.text for m in app.memory.list_memories("buddy")]
    assert "User likes Python" not in texts
    assert "Bob's locker code is 4711" in texts
    app.close()


def test_chat_over_stdio_runs_a_real_turn_and_says_what_was_recalled(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """chat stores the message and the reply, and returns the reply with the memories the turn was
    given; the channel's visibility rules are a turn's: alice's memory learned elsewhere is not
    recalled in a shared channel (#general), and is in her direct channel, where chat goes by default."""
    home = write_home(tmp_path)
    app = App(load_config(home, environ={}), embedder=embedder)
    app.memory.add("buddy", Scope.user("alice"), "User's favorite color is blue", "preference")
    app.memory.add("buddy", Scope.user("alice"), "The cat is called Tom", "fact")
    replies: list[dict[str, Any]] = []

    async def session(client: Client) -> None:
        for where in ({"channel": "general"}, {}):
            result = await call(client, "chat", message="What is my favorite color?", **where)
            assert not result.is_error, result
            replies.append(payload(result))
        unknown = await call(client, "chat", message="hello", persona="nobody")
        assert unknown.is_error
        assert payload(unknown)["error"]["code"] == "not_found"

    run(session, stdio_params(home, "--persona", "buddy", "--user", "alice"))
    shared, direct = replies
    assert "general" in app.personas["buddy"].channels  # the persona's home: chat does not go there unasked
    assert shared["persona"] == "buddy"
    assert shared["channel"] == "general"
    assert shared["reply"]
    assert shared["memories"] == []
    assert direct["channel"] == "dm-alice"
    assert [m["text"] for m in direct["memories"]] == ["User's favorite color is blue"]
    with app.store.read() as conn:
        stored = app.store.messages.history_page(conn, "dm-alice", None, 10)
    assert [m[2] for m in reversed(stored)] == ["What is my favorite color?", direct["reply"]]
    app.close()


def test_chat_recalls_what_the_same_session_remembered(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """The first hour's MCP case: ``agentd mcp --persona buddy --user bob``, remember, then chat
    without naming a channel: the turn runs in bob's own channel and recalls what he stored."""
    home = write_home(tmp_path)
    replies: list[dict[str, Any]] = []

    async def session(client: Client) -> None:
        stored = await call(client, "remember", text="Bob prefers green tea")
        assert not stored.is_error, stored
        result = await call(client, "chat", message="What do I like to drink?")
        assert not result.is_error, result
        replies.append(payload(result))

    run(session, stdio_params(home, "--persona", "buddy", "--user", "bob"))
    assert replies[0]["channel"] == "dm-bob"
    assert [m["text"] for m in replies[0]["memories"]] == ["Bob prefers green tea"]
