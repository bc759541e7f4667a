"""Channel adapters: post a message, follow the channel's events, read messages back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from agentd._exceptions import InvalidInput
from agentd.api.chat import SSE_DOC
from agentd.api.responses import COMMON_ERRORS, MessagePage, PostAccepted, error_responses
from agentd.api.roles import Policy, allow, caller_of
from agentd.api.schemas import MAX_ID, ChannelPost
from agentd.api.sse import HEADERS, MEDIA_TYPE
from agentd.api.state import Daemon, daemon
from agentd.scopes import IDENTIFIER_PATTERN, check_identifier

router = APIRouter(tags=["channels"], responses=COMMON_ERRORS)
#: A channel name in a path.
Channel = Annotated[str, Path(pattern=IDENTIFIER_PATTERN, description="1-128 characters, no whitespace.")]


@router.post(
    "/v1/channels/{channel}/messages",
    status_code=202,
    response_model=PostAccepted,
    responses=error_responses(403, 404, 422, 429),
    **allow(Policy.CHANNEL),
)
async def post_message(
    channel: Channel, body: ChannelPost, d: Annotated[Daemon, Depends(daemon)], request: Request
) -> JSONResponse:
    """Store a message for the channel's persona and answer at once with its id (202).

    The reply arrives on ``GET /v1/channels/{channel}/events`` and can be read
    back with ``GET /v1/channels/{channel}/messages?after=ID``. Without
    ``persona``, the persona the text addresses (``NAME: ...`` or ``@NAME``)
    answers, else the channel's default (the first of ``[channels.NAME] personas``).
    """
    persona = d.persona_for(channel, body.persona, body.text)
    accepted = await run_in_threadpool(
        lambda: d.runtime.submit(
            persona,
            channel,
            body.user,
            body.text,
            disable_memory=body.disable_memory,
            source="channel",
            visibility=body.visibility,
            caller=caller_of(request),
        )
    )
    d.hub.wake(channel)
    return JSONResponse(
        {
            "id": accepted.message_id,
            "channel": channel,
            "persona": persona,
            "request_id": accepted.request_id,
            "status": "accepted",
        },
        status_code=202,
    )


@router.get(
    "/v1/channels/{channel}/events",
    response_class=StreamingResponse,
    responses={**SSE_DOC, **error_responses(429)},
    **allow(Policy.CHANNEL),
)
async def events(
    channel: Channel,
    request: Request,
    d: Annotated[Daemon, Depends(daemon)],
    after: Annotated[
        int | None, Query(ge=0, le=MAX_ID, description="Replay stored messages after this id first.")
    ] = None,
    last_event_id: Annotated[str | None, Header(description="Resume after this message id (SSE reconnect).")] = None,
) -> StreamingResponse:
    """Follow a channel: ``message`` events (stored messages, ``id:`` = message id) and the
    live events of its turns. Reconnect with ``Last-Event-ID`` (or ``?after=``) to
    get every message after that id, once."""
    check_identifier("channel", channel)
    caller = caller_of(request)
    key = caller.name if caller is not None else ""
    d.hub.admit(channel, key)  # 429 too_many_followers before the stream starts
    start = after
    if last_event_id is not None and last_event_id.strip():
        try:
            start = int(last_event_id)
        except ValueError:
            raise InvalidInput("Last-Event-ID", "must be a message id (an integer)") from None
        if not 0 <= start <= MAX_ID:
            raise InvalidInput("Last-Event-ID", f"must be a message id between 0 and {MAX_ID}")
    return StreamingResponse(d.hub.stream(channel, start, key=key), media_type=MEDIA_TYPE, headers=HEADERS)


@router.get(
    "/v1/channels/{channel}/messages",
    response_model=MessagePage,
    responses=error_responses(403, 422),
    **allow(Policy.CHANNEL),
)
def read_messages(
    channel: Channel,
    d: Annotated[Daemon, Depends(daemon)],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only messages with a larger id.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """A channel's user messages and replies after ``after``, oldest first."""
    check_identifier("channel", channel)
    messages = d.hub.messages_after(channel, after, limit)
    return {
        "channel": channel,
        "messages": [m.as_json() for m in messages],
        "last_id": messages[-1].id if messages else after,
    }
