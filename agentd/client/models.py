"""What :mod:`agentd.client` returns that the API has no model for: a stream's events.

Every other answer is read into the model the API serves it as, from
:mod:`agentd.schemas.responses` (:class:`~agentd.schemas.responses.Health`,
:class:`~agentd.schemas.responses.MemoryOut`, …): one shape on both sides of the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
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
