"""Channel adapters: post a message, follow the channel's events, read messages back."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from agentd._exceptions import InvalidInput
from agentd.access.scopes import IDENTIFIER_PATTERN, check_identifier
from agentd.api.chat import SSE_DOC
from agentd.api.keys import Principal, Role
from agentd.api.redact import reduced
from agentd.api.roles import Acting, Policy, allow, caller_of
from agentd.api.schemas import MAX_ID, ChannelPost
from agentd.api.sse import HEADERS, MEDIA_TYPE
from agentd.api.state import Daemon, daemon
from agentd.ops import chat as ops
from agentd.ops.chat import in_conversation
from agentd.schemas.responses import COMMON_ERRORS, ChannelList, MessagePage, PostAccepted, error_responses

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
    channel: Channel, body: ChannelPost, d: Annotated[Daemon, Depends(daemon)], ctx: Acting
) -> JSONResponse:
    """Store a message for the channel's persona and answer at once with its id (202).

    The reply arrives on ``GET /v1/channels/{channel}/events`` and can be read
    back with ``GET /v1/channels/{channel}/messages?after=ID``. Without
    ``persona``, the persona the text addresses (``NAME: ...`` or ``@NAME``)
    answers, else the channel's default (the first of ``[channels.NAME] personas``). In a room
    (a channel bound to several personas) ``[channels.NAME] answer`` decides: ``persona`` is the
    first to answer, ``triggered`` the others in order (``persona`` null: nobody is asked to).
    """
    accepted = await run_in_threadpool(
        ops.chat, in_conversation(ctx, d.runtime, source="channel"), body.to_request(channel)
    )
    d.hub.wake(channel)
    return JSONResponse(
        {
            "id": accepted.message_id,
            "channel": channel,
            "persona": accepted.persona or None,
            "triggered": list(accepted.also),
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
    request: Request,
    d: Annotated[Daemon, Depends(daemon)],
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Only messages with a larger id.")] = 0,
    before: Annotated[
        int | None,
        Query(ge=1, le=MAX_ID, description=f"The newest ``limit`` messages with a smaller id ({MAX_ID}: the newest)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    context: Annotated[bool, Query(description="Add each reply's context record (what it was given).")] = False,
) -> dict[str, Any]:
    """A channel's user messages and replies after ``after`` (or the newest before ``before``), oldest first."""
    check_identifier("channel", channel)
    store = d.app.store
    more_before = False
    with store.read() as conn:
        if before is None:
            messages = store.messages.after(conn, channel, after, limit)
        else:
            newest = store.messages.recent(conn, channel, limit + 1, before)
            more_before = len(newest) > limit
            messages = [m for m in reversed(newest[:limit]) if m.id > after]
        records = store.contexts.for_replies(conn, [m.id for m in messages if m.role == "assistant"]) if context else {}
    whole = _sees_private(caller_of(request))
    return {
        "channel": channel,
        "messages": [
            {**m.as_json(), **({"context": _context(records[m.id], whole)} if m.id in records else {})}
            for m in messages
        ],
        "last_id": messages[-1].id if messages else after,
        "more_before": more_before,
    }


def _sees_private(caller: Principal | None) -> bool:
    """Whether the caller may read users' own memories in context records (an admin, or a keyless local daemon)."""
    return caller is None or caller.role is Role.ADMIN


def _context(data: dict[str, Any], whole: bool) -> dict[str, Any]:
    """What the page shows of a reply's record: model, recalled memories and earlier exchanges, budget."""

    def shown(items: Any) -> list[dict[str, Any]]:
        return [m if whole else reduced(m) for m in items or ()]

    return {
        "model": data.get("model"),
        "memories": shown(data.get("memories")),
        "episodes": shown(data.get("episodes")),
        "budget": data.get("budget") or {},
        "retrieval": data.get("retrieval") or {},
    }


@router.get("/v1/channels", response_model=ChannelList, **allow(Policy.ANY))
def list_channels(request: Request, d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """The channels the caller may use: those configured (``[channels.NAME]``) and those with messages, by name.
    An adapter key sees the channels its globs match; a service key none."""
    caller = caller_of(request)
    config = d.app.config.channels
    with d.app.store.read() as conn:
        stored = {name: (vis, owner, count) for name, vis, owner, count in d.app.store.messages.channels(conn)}
    names = sorted(set(stored) | set(config))
    return {
        "channels": [
            {
                "name": name,
                "visibility": stored.get(name, (None, None, 0))[0],
                "owner": stored.get(name, (None, None, 0))[1],
                "personas": list(config[name].personas) if name in config else [],
                "message_count": stored.get(name, (None, None, 0))[2],
            }
            for name in names
            if caller is None or caller.may_use_channel(name)
        ]
    }
