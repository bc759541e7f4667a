"""The actor runtime: a supervisor, one actor per (persona, channel), and respond()."""

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
