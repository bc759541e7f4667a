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
``PersonaOut``, ``PostAccepted``, ``MessageOut``, ``MemoryAdded``, ``MemoryOut``, ``MemoryHitOut``,
``KnownFactsResponse``, ``BudgetResponse``); a field a newer daemon adds is ignored. Each error
code raises its own class (:mod:`agentd.client.errors`).

Channel adapters use :meth:`AgentdClient.post` and :meth:`AgentdClient.follow`
(which resumes with ``Last-Event-ID`` after a dropped connection or a daemon
restart). :class:`AsyncAgentdClient` has the same calls for asyncio.
"""

from agentd.client.aio import AsyncAgentdClient, AsyncFeed
from agentd.client.backoff import Backoff
from agentd.client.errors import ApiError, DaemonUnreachable
from agentd.client.models import StreamEvent
from agentd.client.sync import DEFAULT_URL, AgentdClient, Feed

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
