"""Schedules over HTTP: ``GET/POST /v1/schedules``, ``GET/DELETE /v1/schedules/{id}``.

Admin and service keys. An admin key sees and changes every schedule; a service key acts for
one user, named in the body (``POST``) or the ``user`` query parameter (the others), and sees
and cancels only that user's schedules (another's is 404, as if it did not exist). The checks
are :mod:`agentd.timing.schedules`' (the CLI's and the ``schedule`` skill's too): a bad ``at``,
``cron`` or ``timezone`` is 422 naming the field and why.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agentd._exceptions import Forbidden, InvalidInput
from agentd.access.scopes import IDENTIFIER_PATTERN
from agentd.api.keys import Principal, Role
from agentd.api.roles import Policy, allow, caller_of
from agentd.api.schemas import MAX_ID, MAX_NAME, Identifier, PersonaName, Text, _Body
from agentd.api.state import Daemon, daemon
from agentd.schemas.responses import COMMON_ERRORS, _Out, error_responses
from agentd.timing.schedules import ScheduleRequest, cancel, get, listing, make

router = APIRouter(tags=["schedules"], responses=COMMON_ERRORS)


async def _caller(request: Request) -> Principal | None:
    return caller_of(request)


#: Who is calling (the door put it there; the route's policy admitted it).
Caller = Annotated[Principal | None, Depends(_caller)]


class NewScheduleBody(_Body):
    """``POST /v1/schedules``: ``at`` (one time) or ``cron`` (a recurrence), exactly one."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["at"]}, {"required": ["cron"]}]})

    persona: PersonaName
    channel: Identifier
    user: Identifier | None = Field(None, description="Whose memories its firings recall; a service key must name one.")
    text: Text = Field(description="What the persona is told when it fires (its turn's trigger message).")
    # ``str`` with no value, not ``str | None``: absent, never null (the schema's oneOf counts a key
    # as given, so a null would be one given); hence the ignores.
    at: str = Field(  # type: ignore[assignment]
        None,
        description="ISO 8601 with an offset, in the future (e.g. 2026-11-28T09:00:00+01:00).",
        json_schema_extra={"format": "date-time"},
    )
    cron: str = Field(None, max_length=128, description="Five fields: minute hour day month weekday.")  # type: ignore[assignment]
    timezone: str | None = Field(None, max_length=64, description="IANA name for cron (default UTC).")


class ScheduleOut(_Out):
    """One schedule."""

    id: int
    persona: str
    channel: str
    user: str | None
    text: str
    at: str | None
    cron: str | None
    timezone: str | None
    next_at: str | None = Field(description="When it is next due (null once fired, missed or cancelled).")
    state: str = Field(description="scheduled | fired | missed | cancelled")
    created_by: str
    created_at: str
    last_fired_at: str | None
    fired_count: int
    last_message_id: int | None = Field(description="The trigger message of its last firing.")
    routine: str | None = Field(description="The persona file's [[routines]] entry it mirrors.")


class ScheduleList(_Out):
    """``GET /v1/schedules``: newest first."""

    schedules: list[ScheduleOut]


#: A schedule's state, as a filter.
State = Literal["scheduled", "fired", "missed", "cancelled"]
ScheduleId = Annotated[int, Path(ge=1, le=MAX_ID)]
UserParam = Annotated[str | None, Query(pattern=IDENTIFIER_PATTERN, description="Only this user's.")]


def _for(who: Principal | None, user: str | None) -> str | None:
    """The user a call is limited to: a service key's (required), an admin's filter (optional)."""
    if who is None or who.role is Role.ADMIN:
        return user
    if user is None:
        raise InvalidInput("user", "a service key acts for one user: name it")
    may = getattr(who, "may_act_as", None)  # keys that name their users (when the store has them)
    if callable(may) and who.role is not Role.SERVICE and not may(user):
        raise Forbidden(f"the key {who.name!r} may not act as {user!r}")
    return user


def _by(who: Principal | None) -> str:
    return "local" if who is None else f"key:{who.name}"


@router.get("/v1/schedules", response_model=ScheduleList, responses=error_responses(422), **allow(Policy.SERVICE))
async def list_schedules(
    d: Annotated[Daemon, Depends(daemon)],
    who: Caller,
    state: Annotated[State | None, Query(description="Only those in this state.")] = None,
    persona: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME)] = None,
    user: UserParam = None,
) -> dict[str, Any]:
    """Schedules in every state, newest first, unless ``state``, ``persona`` or ``user`` filter them."""
    only = _for(who, user)
    found = await run_in_threadpool(lambda: listing(d.app.store, state=state, persona=persona, user=only))
    return {"schedules": [s.as_json() for s in found]}


@router.post(
    "/v1/schedules",
    response_model=ScheduleOut,
    status_code=201,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def create_schedule(body: NewScheduleBody, d: Annotated[Daemon, Depends(daemon)], who: Caller) -> dict[str, Any]:
    """Make a schedule: its persona takes a turn in ``channel`` at ``at``, or at each occurrence of
    ``cron`` in ``timezone``, triggered by ``text``."""
    user = _for(who, body.user)
    request = ScheduleRequest(body.persona, body.channel, body.text, user, body.at, body.cron, body.timezone)
    made = await run_in_threadpool(lambda: make(d.app.store, d.app.config, d.app.personas, request, _by(who)))
    return made.as_json()


@router.get(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def get_schedule(
    schedule_id: ScheduleId, d: Annotated[Daemon, Depends(daemon)], who: Caller, user: UserParam = None
) -> dict[str, Any]:
    """One schedule (a service key: only its user's)."""
    only = _for(who, user)
    return (await run_in_threadpool(lambda: get(d.app.store, schedule_id, only))).as_json()


@router.delete(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def cancel_schedule(
    schedule_id: ScheduleId, d: Annotated[Daemon, Depends(daemon)], who: Caller, user: UserParam = None
) -> dict[str, Any]:
    """Cancel a schedule still to fire; answers it as it is now (one already fired, missed or
    cancelled is left so)."""
    only = _for(who, user)
    return (await run_in_threadpool(lambda: cancel(d.app.store, schedule_id, only))).as_json()
