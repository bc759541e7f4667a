"""The OpenAI-compatible API: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any OpenAI client (the ``openai`` SDK, Open WebUI, LibreChat, LangChain's
ChatOpenAI, litellm) talks to agentd's personas through these routes:

* ``model`` names the persona; ``GET /v1/models`` lists them.
* ``user`` (else ``safety_identifier``, else who the caller is: the default user on a
  loopback daemon without keys, the key's user with keys; :mod:`agentd.access.identity`) is the memory user.
* The channel is ``metadata.channel``, by default ``dm-<user>`` (a private channel
  per user). ``metadata.disable_memory = "true"`` skips automatic retrieval.
* The last message must be the user's: it is the new message, stored and
  answered by the same runtime as every other (memory, history, budget,
  ``agentd inspect``). Earlier messages are reconciled with the channel's stored
  history (:mod:`agentd.api.client_messages`), never blindly duplicated.
* ``tool_choice = "none"`` answers without the persona's tools; client-side
  ``tools`` are refused (a persona's tools run inside agentd). Sampling options
  (temperature, max_tokens, ...) are ignored: the persona file sets them.
* What was recalled travels in an extra ``agentd`` object that plain clients
  ignore: on the first chunk of a stream (``memories``, ``near_misses``,
  ``episodes``, ``history``), on the last (``message_id``, ``budget``), and on the response.
* Errors use OpenAI's shape (:mod:`agentd.api.openai_errors`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agentd._exceptions import InvalidInput, NotFound
from agentd.access.identity import acting_user
from agentd.access.scopes import check_identifier, unseen_character
from agentd.api.client_messages import Earlier, reconcile
from agentd.api.errors import seconds_until
from agentd.api.openai_errors import openai_error
from agentd.api.roles import Acting, Policy, allow, caller_of
from agentd.api.sse import HEADERS, KEEPALIVE, MEDIA_TYPE, EventBridge
from agentd.api.state import Daemon, daemon
from agentd.ops import chat as ops
from agentd.ops.base import parse
from agentd.ops.chat import ChatRequest, check_channel, in_conversation, persona_for
from agentd.runtime import Done, Error, Event, HistoryContext, MemoryContext, TokenDelta
from agentd.schemas.responses import openai_error_responses
from agentd.spend.caps import SpendCaps

#: The key check, the Host check, the body limit, bad input (400, as OpenAI answers it), an
#: unknown model, an unwritable store or a stopping daemon, a bug, a turn's timeout.
router = APIRouter(tags=["openai"], responses=openai_error_responses(400, 401, 404, 413, 421, 429, 500, 503, 504))

#: The memory user when a request names none.
#: HTTP status of a turn that ended with an Error event (non-streaming), by its code.
_TURN_STATUS = {
    "context_overflow": 400,
    "shutting_down": 503,
    "interrupted": 503,
    "timeout": 504,
    # A 2xx would be read as a completion by OpenAI's SDKs: the reply follows the owner's decision.
    "awaiting_approval": 409,
    "budget_exceeded": 429,
}
#: The roles a message may have (OpenAI's).
MessageRole = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ChatMessage(BaseModel):
    """One message of the conversation (OpenAI's fields; the ones agentd does not use are kept and ignored)."""

    model_config = ConfigDict(extra="allow", strict=True)

    role: MessageRole
    content: Any = Field(None, description="Text, or a list of content parts of which only text parts are read.")


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` (OpenAI's fields; the ones agentd does not use are accepted and ignored).
    Strict, as agentd's own bodies: ``"stream": 0`` is not a boolean."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str = Field(description="The persona that answers.")
    messages: list[ChatMessage] = Field(
        min_length=1,
        description="The conversation; the last is the user's.",
        examples=[[{"role": "user", "content": "What did I say about my trip?"}]],
    )
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = Field(
        None,
        description="The memory user (default: safety_identifier, else the daemon's default user ([user] name, "
        "else its login name) on a loopback daemon without keys; with keys, the key's user (the one it was made "
        "for, else the key's name).",
    )
    safety_identifier: str | None = None
    metadata: dict[str, str] | None = Field(
        None,
        description="channel (default dm-<user>, direct); visibility ('direct' | 'shared', declared by the "
        "channel's first message); disable_memory ('true' skips automatic retrieval).",
    )
    tools: list[dict[str, Any]] | None = Field(None, description="Refused when not empty: personas run their own.")
    tool_choice: str | dict[str, Any] | None = Field(None, description="'none': answer without the persona's tools.")
    n: int | None = Field(None, description="Only 1.")


def _text(content: Any, field: str) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text"):
                raise InvalidInput(f"{field}[{i}]", "only text content parts are supported")
            parts.append(str(part.get("text", "")))
        return "\n".join(parts)
    raise InvalidInput(field, "must be a string or a list of text parts")


def _split(messages: list[dict[str, Any]]) -> tuple[str, list[Earlier]]:
    """The new user message, and the earlier user/assistant messages with text."""
    last = len(messages) - 1
    if messages[last].get("role") != "user":
        raise InvalidInput(f"messages[{last}].role", "the last message must be the user's (the new message)")
    text = _text(messages[last].get("content"), f"messages[{last}].content")
    earlier = []
    for i, m in enumerate(messages[:last]):
        if m["role"] not in ("user", "assistant"):
            continue
        body = _text(m.get("content"), f"messages[{i}].content") if m["role"] == "user" else _loose(m)
        if body.strip():
            earlier.append(Earlier(m["role"], body))
    return text, earlier


def _loose(message: dict[str, Any]) -> str:
    """An assistant message's text (tool-call-only turns have none)."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _tools_off(body: ChatCompletionRequest) -> bool:
    if body.tools:
        raise InvalidInput("tools", "client-side tools are not supported: a persona's tools (skills) run inside agentd")
    if body.n not in (None, 1):
        raise InvalidInput("n", "only one choice (n = 1) is supported")
    choice = body.tool_choice
    if choice is None or choice == "auto":
        return False
    if choice == "none":
        return True
    raise InvalidInput("tool_choice", "must be 'auto' or 'none'")


def _extension_start(
    memory: MemoryContext | None, history: HistoryContext | None, meta: dict[str, Any]
) -> dict[str, Any]:
    return {
        **meta,
        "memory_status": memory.status if memory else "none",
        "memories": [m.__dict__ for m in memory.memories] if memory else [],
        "near_misses": [m.__dict__ for m in memory.near_misses] if memory else [],
        "episodes": [m.__dict__ for m in memory.episodes] if memory else [],
        "history": [h.__dict__ for h in history.snippets] if history else [],
    }


def _model_entry(d: Daemon, name: str) -> dict[str, Any]:
    p = d.app.personas[name]
    return {
        "id": p.name,
        "object": "model",
        "created": 0,
        "owned_by": "agentd",
        "agentd": {"model": p.model, "description": p.description, "channels": list(p.channels)},
    }


def _check_model(d: Daemon, model: str) -> None:
    unseen = unseen_character(model)
    if unseen is not None:
        raise InvalidInput("model", f"must not hold control, invisible or bidirectional characters: {unseen}")
    known = list(d.app.personas)  # names (``in`` on Personas raises NotFound for "persona")
    if model not in known:
        raise NotFound("model", model, f"known models (personas): {', '.join(known) or 'none'}")


@router.get("/v1/models", **allow(Policy.ANY))
def list_models(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """The personas, as OpenAI models (``id`` = persona name)."""
    return {"object": "list", "data": [_model_entry(d, p.name) for p in d.app.personas.values()]}


@router.get("/v1/models/{model}", **allow(Policy.ANY))
def get_model(model: str, d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """One persona, as an OpenAI model."""
    _check_model(d, model)
    return _model_entry(d, model)


@router.post(
    "/v1/chat/completions",
    # 403: a channel (metadata.channel) the key may not use, or a delegation's internal one.
    responses={200: {"content": {MEDIA_TYPE: {}, "application/json": {}}}, **openai_error_responses(403)},
    **allow(Policy.CHANNEL),
)
async def chat_completions(
    body: ChatCompletionRequest, d: Annotated[Daemon, Depends(daemon)], request: Request, ctx: Acting
) -> Any:
    """Answer the conversation's last user message as the persona named by ``model``
    (a ``chat.completion``, or ``chat.completion.chunk`` server-sent events with ``stream``)."""
    _check_model(d, body.model)
    caller = caller_of(request)
    user = acting_user(body.user or body.safety_identifier, caller, d.app.config)
    check_identifier("user", user)
    meta = body.metadata or {}
    channel = meta.get("channel") or f"dm-{user}"
    check_channel(ctx, channel)
    ctx.check_user(user)  # before the earlier messages are stored as ``user``
    persona = persona_for(d.app, channel, body.model)
    text, earlier = _split([m.model_dump() for m in body.messages])
    if not text.strip():
        raise InvalidInput(f"messages[{len(body.messages) - 1}].content", "must not be empty or whitespace")
    # The default channel is this user's own; a named one is shared unless the caller says otherwise.
    visibility = meta.get("visibility") or (None if meta.get("channel") else "direct")
    disable_memory = meta.get("disable_memory", "").lower() in ("true", "1", "yes")
    given = {"persona": persona, "channel": channel, "user": user, "message": text, "visibility": visibility}
    asked = parse(ChatRequest, {**given, "disable_memory": disable_memory})  # refused before anything is stored
    d.runtime.check_room(persona, channel)  # 429 before the earlier messages are stored
    # A spend cap reached: 429 with Retry-After at its reset, before anything is stored (a streamed
    # answer could not change its status later). The turn checks again (a cap reached meanwhile).
    caps = SpendCaps(d.app.config, d.app.store, d.app.personas)
    await d.probe(lambda: caps.check(d.app.personas[persona], user))
    imported = await run_in_threadpool(reconcile, d.app.store, channel, user, persona, earlier)
    bridge = EventBridge(asyncio.get_running_loop())
    conversation = in_conversation(ctx, d.runtime, bridge.sink, "openai", disable_tools=_tools_off(body))
    accepted = await run_in_threadpool(ops.chat, conversation, asked)
    d.hub.wake(channel)
    info = {
        "channel": channel,
        "user": user,
        "persona": persona,
        "user_message_id": accepted.message_id,
        "imported": imported,
    }
    completion_id = f"chatcmpl-{accepted.request_id}"
    created = int(time.time())
    if body.stream:
        usage = bool((body.stream_options or {}).get("include_usage"))
        chunks = _chunks(bridge, completion_id, created, persona, info, usage)
        headers = {**HEADERS, "X-Agentd-Message-Id": str(accepted.message_id)}
        return StreamingResponse(chunks, media_type=MEDIA_TYPE, headers=headers)
    return await _complete(bridge, completion_id, created, persona, info)


async def _complete(
    bridge: EventBridge, completion_id: str, created: int, persona: str, info: dict[str, Any]
) -> JSONResponse:
    memory: MemoryContext | None = None
    history: HistoryContext | None = None
    async for event in bridge.events():
        if isinstance(event, MemoryContext):
            memory = event
        elif isinstance(event, HistoryContext):
            history = event
        elif isinstance(event, Error):
            status = _TURN_STATUS.get(event.code, 502)
            headers = {"Retry-After": str(seconds_until(event.resets_at))} if event.resets_at else None
            return JSONResponse(openai_error(status, event.code, event.message), status_code=status, headers=headers)
        elif isinstance(event, Done):
            extension = {
                **_extension_start(memory, history, info),
                "message_id": event.message_id,
                "budget": event.budget,
            }
            return JSONResponse(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": persona,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": event.text, "refusal": None},
                            "logprobs": None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": event.usage,
                    "agentd": extension,
                }
            )
    raise AssertionError("a turn always ends with done or error")  # pragma: no cover


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


async def _chunks(
    bridge: EventBridge, completion_id: str, created: int, persona: str, info: dict[str, Any], include_usage: bool
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": persona}
        return _sse({**base, "choices": [choice], **extra})

    memory: MemoryContext | None = None
    history: HistoryContext | None = None
    started = False
    event: Event | None
    async for event in bridge.events():
        if event is None:
            yield KEEPALIVE
        elif isinstance(event, MemoryContext):
            memory = event
        elif isinstance(event, HistoryContext):
            history = event
        elif isinstance(event, Error):
            yield _sse(openai_error(_TURN_STATUS.get(event.code, 502), event.code, event.message))
            return
        else:
            if not started:  # the first chunk carries what was recalled
                started = True
                yield chunk({"role": "assistant", "content": ""}, agentd=_extension_start(memory, history, info))
            if isinstance(event, TokenDelta) and event.text:
                yield chunk({"content": event.text})
            elif isinstance(event, Done):
                yield chunk({}, "stop", agentd={"message_id": event.message_id, "budget": event.budget})
                if include_usage:
                    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created}
                    yield _sse({**base, "model": persona, "choices": [], "usage": event.usage})
                yield b"data: [DONE]\n\n"
