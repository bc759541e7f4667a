"""A small typed client for a running agentd (httpx + httpx-sse), blocking and asyncio.

::

    from agentd.client import AgentdClient

    with AgentdClient("http://127.0.0.1:8765", api_key=None) as agentd:
        agentd.add_memory("buddy", "Alice's favorite color is blue", user="alice", category="preference")
        for event in agentd.chat("buddy", "dm-alice", "alice", "What is my favorite color?"):
            if event.event == "memory_context":
                print("recalled:", [m["text"] for m in event.data["memories"]])
            elif event.event == "token_delta":
                print(event.data["text"], end="", flush=True)

Answers are the models the API serves them as (:mod:`agentd.schemas.responses`: ``Health``,
``PersonaOut``, ``PostAccepted``, ``MessageOut``, ``MemoryOut``, ``MemoryHitOut``,
``KnownFactsResponse``, ``BudgetResponse``); a field a newer daemon adds is ignored. Each error
code raises its own class (:mod:`agentd.client.errors`).

Channel adapters use :meth:`AgentdClient.post` and :meth:`AgentdClient.follow`
(which resumes with ``Last-Event-ID`` after a dropped connection or a daemon
restart). :class:`AsyncAgentdClient` has the same calls for asyncio.
"""

import warnings
from typing import Any

from agentd.client.aio import AsyncAgentdClient, AsyncFeed
from agentd.client.backoff import Backoff
from agentd.client.errors import ApiError, DaemonUnreachable
from agentd.client.models import StreamEvent
from agentd.client.sync import DEFAULT_URL, AgentdClient, Feed
from agentd.schemas.responses import MemoryOut, PostAccepted

#: Names this package had for answers that are now the API's own models; removed in 0.3.0.
_DEPRECATED: dict[str, tuple[type[Any], str]] = {
    "Memory": (MemoryOut, "agentd.schemas.responses.MemoryOut (search results: MemoryHitOut)"),
    "Posted": (PostAccepted, "agentd.schemas.responses.PostAccepted"),
}


def __getattr__(name: str) -> Any:
    """A deprecated name: its model, with a :class:`DeprecationWarning` naming the new one."""
    if name in _DEPRECATED:
        model, new = _DEPRECATED[name]
        warnings.warn(f"agentd.client.{name} is deprecated (removed in 0.3.0): use {new}", DeprecationWarning, 2)
        return model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_URL",
    "AgentdClient",
    "ApiError",
    "AsyncAgentdClient",
    "AsyncFeed",
    "Backoff",
    "DaemonUnreachable",
    "Feed",
    "StreamEvent",
]
