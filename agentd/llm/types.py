"""The values a chat model takes and gives, and the protocol every model implements.

Two implementations: :class:`~agentd.llm.chat.LitellmChat` (any model litellm speaks to) and
:class:`~agentd.llm.offline.OfflineChat` (the built-in offline model); ``LitellmChat`` chooses
between them by the model's name, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call the model asked for; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    """Token usage of one model call (or the sum over a turn's rounds)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def as_pair(self) -> tuple[int, int]:
        """``(prompt_tokens, completion_tokens)``."""
        return self.prompt_tokens, self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def as_json(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ModelTurn:
    """What one streamed call produced."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    #: True when ``should_stop`` ended the stream early.
    interrupted: bool = False


@dataclass(frozen=True)
class ModelSettings:
    """How to call one persona's model."""

    model: str
    max_tokens: int
    temperature: float | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float = 120.0
    #: Further tries after a transient failure before the first token ([models] retries).
    retries: int = 0
    retry_backoff: float = 0.5
    retry_max_wait: float = 20.0
    #: Who is calling (for the logs).
    persona: str = ""


class ChatModel(Protocol):
    """Streams one chat completion."""

    def stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> ModelTurn:
        """Call the model; ``on_text`` receives each text delta as it arrives."""
        ...


__all__ = ["ChatModel", "ModelSettings", "ModelTurn", "ToolCallRequest", "Usage"]
