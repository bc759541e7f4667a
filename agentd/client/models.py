"""What :mod:`agentd.client` returns: small frozen dataclasses over the API's JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event: its name (``event:``), its JSON ``data``, and the stream's
    last event id so far (as the SSE spec keeps it: it persists across events that
    carry no ``id:``). A channel feed's ``message`` events carry ids; the client
    also yields ``open`` once per (re)connection, when the daemon has subscribed."""

    event: str
    data: dict[str, Any]
    last_event_id: str | None = None


@dataclass(frozen=True)
class Posted:
    """A message the daemon accepted (202): its id, and who will answer."""

    id: int
    channel: str
    persona: str
    request_id: str


@dataclass(frozen=True)
class Memory:
    """One stored memory; ``score`` and ``relevance`` are set on search results."""

    id: int
    persona: str
    scope: str
    category: str
    text: str
    created_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    score: float | None = None
    relevance: float | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Memory:
        """From the API's memory or search-result JSON."""
        return cls(
            id=int(data["id"]),
            persona=str(data.get("persona", "")),
            scope=str(data.get("scope", "")),
            category=str(data.get("category", "")),
            text=str(data["text"]),
            created_at=str(data.get("created_at", "")),
            metadata=dict(data.get("metadata") or {}),
            score=data.get("score"),
            relevance=data.get("relevance"),
        )
