"""Chat completions through litellm: streaming, tool calls, errors mapped to agentd's.

litellm's exceptions are mapped here, once, to :class:`~agentd.LLMError` and its
subclasses; nothing above this module sees a litellm type.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentd._exceptions import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMHttpError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnreachable,
)
from agentd.llm import litellm_module
from agentd.llm.models import missing_credentials
from agentd.llm.offline import ensure_registered, litellm_name


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


def _map_error(exc: Exception, model: str) -> LLMError:
    litellm = litellm_module()
    text = f"{model}: {getattr(exc, 'message', None) or exc}"
    if isinstance(exc, litellm.AuthenticationError):
        return LLMAuthError(text)
    if isinstance(exc, litellm.Timeout):
        return LLMTimeout(text)
    if isinstance(exc, litellm.RateLimitError):
        return LLMRateLimited(text)
    if isinstance(exc, litellm.BadRequestError):
        return LLMBadRequest(text)
    if isinstance(exc, litellm.APIConnectionError):
        return LLMUnreachable(text)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return LLMHttpError(text, status)
    return LLMError(text)


class LitellmChat:
    """The :class:`ChatModel` every persona uses: litellm, streaming, with tools."""

    def __init__(self) -> None:
        self._litellm = litellm_module()
        ensure_registered()

    def stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> ModelTurn:
        """Stream one completion; tool-call deltas are reassembled by index."""
        missing = missing_credentials(settings.model, settings.api_key_env)
        if missing:
            raise LLMAuthError(
                f"model {settings.model!r} needs {', '.join(missing)}, which is not set in the environment"
            )
        kwargs: dict[str, Any] = {
            "model": litellm_name(settings.model),
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": settings.max_tokens,
            "timeout": settings.timeout,
            "num_retries": 0,
        }
        if tools:
            kwargs["tools"] = list(tools)
        if settings.temperature is not None:
            kwargs["temperature"] = settings.temperature
        if settings.api_base:
            kwargs["api_base"] = settings.api_base
        if settings.api_key_env:
            kwargs["api_key"] = os.environ.get(settings.api_key_env, "")
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage = Usage()
        finish: str | None = None
        interrupted = False
        try:
            response = self._litellm.completion(**kwargs)
            for chunk in response:
                chunk_usage = getattr(chunk, "usage", None)
                if chunk_usage:
                    usage = Usage(int(chunk_usage.prompt_tokens or 0), int(chunk_usage.completion_tokens or 0))
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                delta = choice.delta
                if delta is not None and delta.content:
                    text.append(delta.content)
                    on_text(delta.content)
                for call in (delta.tool_calls or []) if delta is not None else []:
                    slot = calls.setdefault(call.index or 0, {"id": "", "name": "", "arguments": ""})
                    if call.id:
                        slot["id"] = call.id
                    if call.function is not None:
                        if call.function.name:
                            slot["name"] = call.function.name
                        if call.function.arguments:
                            slot["arguments"] += call.function.arguments
                if choice.finish_reason:
                    finish = choice.finish_reason
                if should_stop():
                    interrupted = True
                    break
        except LLMError:
            raise
        except Exception as exc:  # litellm raises its own tree (and the occasional bare error)
            raise _map_error(exc, settings.model) from exc
        tool_calls = tuple(
            ToolCallRequest(c["id"] or f"call_{i}", c["name"], c["arguments"] or "{}")
            for i, c in sorted(calls.items())
            if c["name"]
        )
        return ModelTurn("".join(text), tool_calls, usage, finish, interrupted)
