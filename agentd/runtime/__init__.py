"""The runtime: an intake and one dispatcher chosen at start-up.

Directly here: the intake (:mod:`~agentd.runtime.intake`), the dispatcher protocol
(:mod:`~agentd.runtime.dispatch`) and the choice (:mod:`~agentd.runtime.runtime`), the turns in
flight, group commit, and the actor messages and events. In folders: ``pipeline/`` (prepare a
turn, answer it, store it), ``actors/`` (the supervisor, the actors, the local dispatcher) and
``scaleout/`` (worker processes, several daemons on one PostgreSQL).
"""

from agentd._exceptions import ShuttingDown
from agentd.runtime.events import (
    Done,
    Error,
    Event,
    HistoryContext,
    MemoryContext,
    MemorySnippet,
    TokenDelta,
    ToolCall,
    ToolResult,
)
from agentd.runtime.runtime import Accepted, Runtime

__all__ = [
    "Accepted",
    "Done",
    "Error",
    "Event",
    "HistoryContext",
    "MemoryContext",
    "MemorySnippet",
    "Runtime",
    "ShuttingDown",
    "TokenDelta",
    "ToolCall",
    "ToolResult",
]
