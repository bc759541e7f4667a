"""Chat completions through litellm: streaming, tool calls, retries, errors mapped to agentd's.

litellm's exceptions are mapped once (:mod:`agentd.llm.errors`) to
:class:`~agentd.LLMError` and its subclasses; nothing above this module sees a
litellm type.

A reply counts as finished only when the provider said so (a ``finish_reason``
in the stream): a stream that just ends — the connection closed, no
``[DONE]`` — is :class:`~agentd.LLMTruncated` (litellm would otherwise make up a
``stop``), and one that carried nothing readable is :class:`~agentd.LLMMalformed`.

Transient failures (:func:`~agentd.llm.errors.is_transient`) are tried again
before the first token only, so streamed text is never repeated: up to
``retries`` more times, after an exponential backoff with jitter, or after what
``Retry-After`` asked for when the server sent it. The offline model is never
retried: it cannot fail that way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from agentd._exceptions import LLMAuthError, LLMError, LLMMalformed, LLMTruncated
from agentd.llm import litellm_module
from agentd.llm.cost import count_call
from agentd.llm.errors import is_transient, map_error, retry_after
from agentd.llm.models import missing_credentials, request_key
from agentd.llm.offline import OfflineChat, is_offline
from agentd.llm.types import ChatModel, ModelSettings, ModelTurn, ToolCallRequest, Usage
from agentd.observe import tracing
from agentd.observe.log import get_logger
from agentd.timing.backoff import delay

log = get_logger("agentd.llm")


class LitellmChat:
    """The :class:`ChatModel` every persona uses: litellm, streaming, with tools.

    Calls for the offline model go to :class:`~agentd.llm.offline.OfflineChat`, and
    litellm is imported on the first call for any other model.
    """

    def __init__(self) -> None:
        self._offline = OfflineChat()

    @property
    def _litellm(self) -> Any:
        return litellm_module()

    def stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> ModelTurn:
        """Stream one completion, trying again after a transient failure before the first token.
        One span, ``chat MODEL``, with the GenAI semantic conventions' attributes (retries inside)."""
        with tracing.span(f"chat {settings.model}", _chat_attributes(settings), kind="client") as span:
            result = self._stream(settings, messages, tools, on_text, should_stop)
            count_call(settings, result.usage)  # metrics: tokens and cost of every call
            span.set("gen_ai.usage.input_tokens", result.usage.prompt_tokens)
            span.set("gen_ai.usage.output_tokens", result.usage.completion_tokens)
            if result.finish_reason:
                span.set("gen_ai.response.finish_reasons", (result.finish_reason,))
            return result

    def _stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool],
    ) -> ModelTurn:
        if is_offline(settings.model):
            return self._offline.stream(settings, messages, tools, on_text, should_stop)
        api_key = request_key(settings.model, settings.api_key_env, settings.api_base)
        missing = [] if api_key else missing_credentials(settings.model)
        if missing:
            raise LLMAuthError(
                f"model {settings.model!r} needs {', '.join(missing)}, which is not set in the environment"
            )
        retries = 0 if is_offline(settings.model) else settings.retries
        attempt = 0
        while True:
            streamed = False

            def relay(text: str) -> None:
                nonlocal streamed
                streamed = True
                on_text(text)

            try:
                return self._stream_once(settings, messages, tools, relay, should_stop)
            except LLMError as error:
                cause = error.__cause__ if error.__cause__ is not None else error
                wait = self._retry_wait(error, cause, attempt, retries, streamed, settings)
                context = {
                    "persona": settings.persona,
                    "model": settings.model,
                    "api_base": settings.api_base,
                    "code": error.code,
                    "error": error.message,
                    # What litellm said, for whoever reads the logs; the error says it in plain words.
                    "detail": repr(cause)[:500],
                    "attempt": attempt + 1,
                }
                if wait is None or should_stop():
                    log.warning("model_failed", **context)
                    raise
                log.warning("model_retry", **context, wait_s=round(wait, 2))
                if not _sleep(wait, should_stop):
                    raise
                attempt += 1

    @staticmethod
    def _retry_wait(
        error: LLMError, cause: BaseException, attempt: int, retries: int, streamed: bool, settings: ModelSettings
    ) -> float | None:
        """Seconds to wait before trying again, or ``None``: do not."""
        if attempt >= retries or not is_transient(error, streamed):
            return None
        wait = delay(attempt, settings.retry_backoff, settings.retry_max_wait)
        asked = retry_after(cause)
        if asked is not None:
            if asked > settings.retry_max_wait:
                return None  # longer than we are willing to wait: fail now with this error
            wait = max(wait, asked)
        return wait

    def _stream_once(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool],
    ) -> ModelTurn:
        """One streamed call; tool-call deltas are reassembled by index."""
        kwargs: dict[str, Any] = {
            "model": settings.model,
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
        api_key = request_key(settings.model, settings.api_key_env, settings.api_base)
        if api_key:
            kwargs["api_key"] = api_key
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
        except Exception as exc:  # litellm raises its own tree (and the occasional bare error)
            error = map_error(exc, settings.model, settings.api_base, settings.timeout, settings.api_key_env)
            if text and not isinstance(error, LLMTruncated):
                # Part of the reply has streamed: whatever broke, the reply is cut short.
                raise LLMTruncated(f"{settings.model}: the stream broke off ({error.message})") from exc
            raise error from exc
        if not interrupted and _provider_finish(response) is None:
            # litellm ends every stream with a finish_reason, made up ("stop") when the
            # provider sent none: the provider's own is what says the reply is complete.
            if not text and not calls:
                raise LLMMalformed(f"{settings.model}: the answer held no completion (not a chat completion stream)")
            raise LLMTruncated(
                f"{settings.model}: the stream ended before the model finished "
                f"(no finish_reason after {len(''.join(text))} characters)"
            )
        tool_calls = tuple(
            ToolCallRequest(c["id"] or f"call_{i}", c["name"], c["arguments"] or "{}")
            for i, c in sorted(calls.items())
            if c["name"]
        )
        return ModelTurn("".join(text), tool_calls, usage, finish, interrupted)


def _chat_attributes(settings: ModelSettings) -> tracing.Attributes | None:
    """A model call's span attributes (GenAI semantic conventions); none made when tracing is off.

    The provider is the litellm model string's prefix (``openai/gpt-4o`` → ``openai``), ``agentd``
    for the offline model; a model named without one: ``openai`` or ``anthropic`` for their
    models' names, else ``litellm`` (litellm picks the provider; its table is not consulted here).
    """
    if not tracing.enabled():
        return None
    model = settings.model
    provider = "agentd" if is_offline(model) else _provider(model)
    attributes: dict[str, str | int | float] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": provider,
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": settings.max_tokens,
    }
    if settings.temperature is not None:
        attributes["gen_ai.request.temperature"] = settings.temperature
    if settings.persona:
        attributes["agentd.persona"] = settings.persona
    return attributes


def _provider(model: str) -> str:
    if "/" in model:
        return model.split("/", 1)[0]
    if model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-")):
        return "openai"
    return "anthropic" if model.startswith("claude") else "litellm"


def _provider_finish(response: Any) -> str | None:
    """The finish_reason the provider itself sent (litellm's stream wrapper keeps it)."""
    found = getattr(response, "received_finish_reason", None) or getattr(response, "intermittent_finish_reason", None)
    return str(found) if found else None


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> bool:
    """Wait ``seconds`` unless asked to stop first (then False)."""
    deadline = time.monotonic() + seconds
    while True:
        if should_stop():
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(left, 0.05))


__all__ = ["ChatModel", "LitellmChat", "ModelSettings", "ModelTurn", "ToolCallRequest", "Usage"]
