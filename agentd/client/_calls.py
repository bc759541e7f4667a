"""The requests both clients send and how their answers are read (one place for both)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from httpx_sse import ServerSentEvent

from agentd.client.models import Memory, Posted, StreamEvent

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its JSON answer."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: dict[str, Any] | None = None
    ok: tuple[int, ...] = field(default=(200,))


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def channel_path(channel: str, tail: str) -> str:
    """``/v1/channels/{channel}/{tail}`` with the channel name escaped."""
    return f"/v1/channels/{quote(channel, safe='')}/{tail}"


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", dict)


def personas() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/personas", lambda j: list(j["personas"]))


def bindings() -> Call[dict[str, list[str]]]:
    return Call("GET", "/v1/personas", lambda j: {str(k): list(v) for k, v in j.get("channel_bindings", {}).items()})


def post(
    channel: str, user: str, text: str, persona: str | None, disable_memory: bool, visibility: str | None = None
) -> Call[Posted]:
    body = _drop_none(
        {
            "user": user,
            "text": text,
            "persona": persona,
            "disable_memory": disable_memory or None,
            "visibility": visibility,
        }
    )
    return Call(
        "POST",
        channel_path(channel, "messages"),
        lambda j: Posted(int(j["id"]), str(j["channel"]), str(j["persona"]), str(j["request_id"])),
        json=body,
        ok=(202,),
    )


def messages(channel: str, after: int, limit: int) -> Call[list[dict[str, Any]]]:
    return Call(
        "GET", channel_path(channel, "messages"), lambda j: list(j["messages"]), {"after": after, "limit": limit}
    )


def add_memory(
    persona: str,
    text: str,
    category: str,
    scope: str | None,
    user: str | None,
    channel: str | None,
    metadata: dict[str, Any] | None,
) -> Call[tuple[Memory, bool]]:
    body = _drop_none(
        {
            "persona": persona,
            "text": text,
            "category": category,
            "scope": scope,
            "userId": user,
            "channel": channel,
            "metadata": metadata,
        }
    )
    return Call(
        "POST", "/v1/memories", lambda j: (Memory.from_json(j["memory"]), bool(j["created"])), json=body, ok=(200, 201)
    )


def search(
    query: str,
    persona: str | None,
    user: str | None,
    channel: str | None,
    limit: int | None,
    min_score: float | None,
) -> Call[list[Memory]]:
    body = _drop_none(
        {
            "query": query,
            "persona": persona,
            "userId": user,
            "channel": channel,
            "limit": limit,
            "minScore": min_score,
        }
    )
    return Call("POST", "/v1/memory/search", lambda j: [Memory.from_json(r) for r in j["results"]], json=body)


def context(
    user: str,
    query: str,
    token_budget: int | None,
    limit: int | None,
    persona: str | None,
    channel: str | None,
) -> Call[dict[str, Any]]:
    body = _drop_none(
        {
            "userId": user,
            "query": query,
            "tokenBudget": token_budget,
            "limit": limit,
            "persona": persona,
            "channel": channel,
        }
    )
    return Call("POST", "/v1/memory/context", dict, json=body)


def list_memories(persona: str, scope: str | None, limit: int, offset: int) -> Call[list[Memory]]:
    params = _drop_none({"persona": persona, "scope": scope, "limit": limit, "offset": offset})
    return Call("GET", "/v1/memories", lambda j: [Memory.from_json(m) for m in j["memories"]], params)


def forget(memory_id: int) -> Call[Memory]:
    return Call("DELETE", f"/v1/memories/{int(memory_id)}", lambda j: Memory.from_json(j["forgotten"]))


def budget(persona: str, channel: str, user: str | None, message: str | None) -> Call[dict[str, Any]]:
    params = _drop_none({"persona": persona, "channel": channel, "user": user, "message": message})
    return Call("GET", "/v1/budget", dict, params)


def chat_body(
    persona: str, channel: str, user: str, message: str, disable_memory: bool, visibility: str | None = None
) -> dict[str, Any]:
    """The body of ``POST /v1/chat``."""
    body = {"persona": persona, "channel": channel, "user": user, "message": message, "disable_memory": disable_memory}
    return {**body, "visibility": visibility} if visibility is not None else body


def to_event(sse: ServerSentEvent) -> StreamEvent | None:
    """The event for one decoded SSE, or ``None`` for a frame without data (the daemon's
    ``retry:`` frame, keep-alives: the SSE spec dispatches no event for those)."""
    if not sse.data:
        return None

    try:
        data = json.loads(sse.data) if sse.data else {}
    except ValueError:
        data = {"raw": sse.data}
    if not isinstance(data, dict):
        data = {"value": data}
    return StreamEvent(sse.event or "message", data, sse.id or None)
