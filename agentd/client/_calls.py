"""The requests both clients send and how their answers are read (one place for both).

Each answer is read into the model the API serves it as (:mod:`agentd.schemas.responses`):
one shape per answer, on both sides of the wire.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from httpx_sse import ServerSentEvent

from agentd.client.models import StreamEvent
from agentd.schemas.responses import (
    BudgetResponse,
    Forgotten,
    Health,
    KnownFactsResponse,
    MemoryAdded,
    MemoryHitOut,
    MemoryList,
    MemoryOut,
    MessageOut,
    MessagePage,
    PersonaList,
    PersonaOut,
    PostAccepted,
    SearchResponse,
)

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


def health() -> Call[Health]:
    """``GET /healthz``."""
    return Call("GET", "/healthz", Health.model_validate)


def personas() -> Call[list[PersonaOut]]:
    """``GET /v1/personas``: the personas."""
    return Call("GET", "/v1/personas", lambda j: PersonaList.model_validate(j).personas)


def bindings() -> Call[dict[str, list[str]]]:
    """``GET /v1/personas``: the personas each configured channel is bound to."""
    return Call("GET", "/v1/personas", lambda j: PersonaList.model_validate(j).channel_bindings)


def post(
    channel: str, user: str, text: str, persona: str | None, disable_memory: bool, visibility: str | None = None
) -> Call[PostAccepted]:
    """``POST /v1/channels/{channel}/messages``."""
    body = _drop_none(
        {
            "user": user,
            "text": text,
            "persona": persona,
            "disable_memory": disable_memory or None,
            "visibility": visibility,
        }
    )
    return Call("POST", channel_path(channel, "messages"), PostAccepted.model_validate, json=body, ok=(202,))


def messages(channel: str, after: int, limit: int) -> Call[list[MessageOut]]:
    """``GET /v1/channels/{channel}/messages``: the messages after id ``after``."""
    params = {"after": after, "limit": limit}
    return Call("GET", channel_path(channel, "messages"), lambda j: MessagePage.model_validate(j).messages, params)


def add_memory(
    persona: str,
    text: str,
    category: str,
    scope: str | None,
    user: str | None,
    channel: str | None,
    metadata: dict[str, Any] | None,
) -> Call[tuple[MemoryOut, bool]]:
    """``POST /v1/memories``: the memory, and whether it was new (False: an identical one was stored)."""
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
    return Call("POST", "/v1/memories", _added, json=body, ok=(200, 201))


def _added(answer: Any) -> tuple[MemoryOut, bool]:
    added = MemoryAdded.model_validate(answer)
    return added.memory, added.created


def search(
    query: str,
    persona: str | None,
    user: str | None,
    channel: str | None,
    limit: int | None,
    min_score: float | None,
) -> Call[list[MemoryHitOut]]:
    """``POST /v1/memory/search``: the hits, best first."""
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
    return Call("POST", "/v1/memory/search", lambda j: SearchResponse.model_validate(j).results, json=body)


def context(
    user: str,
    query: str,
    token_budget: int | None,
    limit: int | None,
    persona: str | None,
    channel: str | None,
) -> Call[KnownFactsResponse]:
    """``POST /v1/memory/context``."""
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
    return Call("POST", "/v1/memory/context", KnownFactsResponse.model_validate, json=body)


def list_memories(persona: str, scope: str | None, limit: int, offset: int) -> Call[list[MemoryOut]]:
    """``GET /v1/memories``: a page of a persona's memories."""
    params = _drop_none({"persona": persona, "scope": scope, "limit": limit, "offset": offset})
    return Call("GET", "/v1/memories", lambda j: MemoryList.model_validate(j).memories, params)


def forget(memory_id: int) -> Call[MemoryOut]:
    """``DELETE /v1/memories/{id}``: what was deleted."""
    return Call("DELETE", f"/v1/memories/{int(memory_id)}", lambda j: Forgotten.model_validate(j).forgotten)


def budget(persona: str, channel: str, user: str | None, message: str | None) -> Call[BudgetResponse]:
    """``GET /v1/budget``."""
    params = _drop_none({"persona": persona, "channel": channel, "user": user, "message": message})
    return Call("GET", "/v1/budget", BudgetResponse.model_validate, params)


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
        data = json.loads(sse.data)
    except ValueError:
        data = {"raw": sse.data}
    if not isinstance(data, dict):
        data = {"value": data}
    return StreamEvent(sse.event or "message", data, sse.id or None)
