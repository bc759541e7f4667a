"""``POST /v1/chat``: one message, answered as a stream of the turn's events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from agentd.api.roles import Acting, Policy, allow
from agentd.api.sse import HEADERS, MEDIA_TYPE, EventBridge, frame
from agentd.api.state import Daemon, daemon
from agentd.ops import chat as ops
from agentd.ops.chat import ChatAccepted, ChatRequest, in_conversation, room_decides
from agentd.runtime.events import Triggered
from agentd.schemas.responses import COMMON_ERRORS, error_responses

router = APIRouter(tags=["chat"], responses=COMMON_ERRORS)

SSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {MEDIA_TYPE: {}}, "description": "Server-sent events, one per runtime event."},
    **error_responses(403, 404, 422),
}


@router.post(
    "/v1/chat", response_class=StreamingResponse, responses={**SSE_DOC, **error_responses(429)}, **allow(Policy.CHANNEL)
)
async def chat(body: ChatRequest, d: Annotated[Daemon, Depends(daemon)], ctx: Acting) -> StreamingResponse:
    """Send a message and stream the reply as server-sent events.

    Each event's ``event:`` names it and ``data:`` is its JSON: ``memory_context``
    (always first: what was recalled), ``history_context``, ``token_delta``…,
    ``tool_call``/``tool_result``, then ``done`` (the stored reply) or ``error``. In a room
    (a channel bound to several personas) without ``persona``, the room decides who answers
    (``[channels.NAME] answer``): a ``triggered`` event comes first, naming the persona whose reply
    streams here and the others that answer after it (their replies, and the replies of personas
    called on in turn, reach ``GET /v1/channels/{channel}/events``).
    The message is stored before anything else happens; bad input is a 4xx
    before the stream starts.
    """
    bridge = EventBridge(asyncio.get_running_loop())
    accepted = await run_in_threadpool(ops.chat, in_conversation(ctx, d.runtime, bridge.sink, "chat"), body)
    d.hub.wake(body.channel)
    headers = {**HEADERS, "X-Agentd-Message-Id": str(accepted.message_id), "X-Agentd-Request-Id": accepted.request_id}
    if not room_decides(d.app, body.channel, body.persona):
        return StreamingResponse(bridge.frames(), media_type=MEDIA_TYPE, headers=headers)
    return StreamingResponse(_room_frames(accepted, bridge), media_type=MEDIA_TYPE, headers=headers)


async def _room_frames(accepted: ChatAccepted, bridge: EventBridge) -> AsyncIterator[bytes]:
    """In a room: ``triggered`` first (who answers), then the first persona's reply (nobody's: the
    stream ends there)."""
    said = Triggered(accepted.persona, tuple(accepted.also), accepted.message_id)
    yield frame(said.type, said.as_json())
    if accepted.persona:
        async for chunk in bridge.frames():
            yield chunk
