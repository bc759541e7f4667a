"""Schedules: make, list, get and cancel one, whoever asks (HTTP, the CLI, the model's tools).

Each is one operation over the checks of :mod:`agentd.schedules` (a bad ``at``, ``cron`` or
``timezone`` is :class:`~agentd.InvalidInput` naming the field). Who may reach which schedules
is decided here, once: an admin (a key's, or the operator's in process) reaches every schedule
and may filter by ``user``; any other caller acts for one user, named in the request or given
by the conversation (a persona's tool call acts for the user it answers), and reaches only that
user's schedules (another's is ``not_found``, as if it did not exist).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import ConfigDict, Field

from agentd import schedules
from agentd._exceptions import Forbidden, InvalidInput
from agentd.ops.base import ADMIN, OPERATOR, PERSONA, SERVICE, OpContext, Parts, Request, Result, operation, parse
from agentd.ops.fields import MAX_ID, MAX_NAME, Identifier, PersonaName, Text
from agentd.recurrence import check_cron, next_occurrence, parse_at, zone
from agentd.scopes import DELEGATION_MARK
from agentd.store.schedules import NewSchedule, Schedule

#: A schedule's state.
State = Literal["scheduled", "fired", "missed", "cancelled"]
#: Who may reach schedules: an admin (all), a service key and a persona's tool call (one user's).
ROLES = (ADMIN, SERVICE, PERSONA)
#: The longest ``in_minutes`` a reminder may be set for (a year).
MAX_MINUTES = 366 * 24 * 60
#: The most schedules a persona's ``list_schedules`` shows.
TOOL_LIST_LIMIT = 50


class NewScheduleBody(Request):
    """``POST /v1/schedules``: ``at`` (one time) or ``cron`` (a recurrence), exactly one."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["at"]}, {"required": ["cron"]}]})

    persona: PersonaName
    channel: Identifier
    user: Identifier | None = Field(
        default=None, description="Whose memories its firings recall; a service key must name one."
    )
    text: Text = Field(description="What the persona is told when it fires (its turn's trigger message).")
    # ``str`` with no value, not ``str | None``: absent, never null (the schema's oneOf counts a key
    # as given, so a null would be one given); hence the ignores.
    at: str = Field(  # type: ignore[assignment]
        None,
        description="ISO 8601 with an offset, in the future (e.g. 2026-11-28T09:00:00+01:00).",
        json_schema_extra={"format": "date-time"},
    )
    cron: str = Field(default=None, max_length=128, description="Five fields: minute hour day month weekday.")  # type: ignore[assignment]
    timezone: str | None = Field(default=None, max_length=64, description="IANA name for cron (default UTC).")


class ScheduleOut(Result):
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

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleOut:
        """The stored schedule, as every interface shows it."""
        return cls.model_validate(schedule.as_json())


class ScheduleList(Result):
    """``GET /v1/schedules``: newest first."""

    schedules: list[ScheduleOut]


class ScheduleQuery(Request):
    """Which schedules to list (every filter optional; a caller that is not an admin: its user's)."""

    state: State | None = Field(default=None, description="Only those in this state.")
    persona: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    user: Identifier | None = Field(default=None, description="Only this user's.")
    limit: int = Field(200, ge=1, le=10_000)


class ScheduleRef(Request):
    """One schedule, by id (``user``: the user a caller that is not an admin acts for)."""

    id: int = Field(ge=1, le=MAX_ID, description="The schedule's id.")
    user: Identifier | None = None


# -- the model's tools: what a persona may say (the conversation gives the rest) -------------------


class ScheduleToolArgs(Request):
    """``schedule``: a reminder at one time (``at`` or ``in_minutes``) or a recurrence (``cron``)."""

    text: Text = Field(description="What to do or say then, e.g. 'Remind alice to stretch'.")
    in_minutes: float | None = Field(default=None, gt=0, le=MAX_MINUTES, description="Minutes from now (one time).")
    at: str | None = Field(default=None, description="ISO 8601 time with an offset (one time).")
    cron: str | None = Field(
        default=None, max_length=128, description="Five-field cron: minute hour day month weekday."
    )
    timezone: str | None = Field(default=None, max_length=64, description="IANA timezone of cron (default UTC).")

    def request(self, ctx: OpContext) -> NewScheduleBody:
        """The schedule to make, in the conversation of ``ctx`` (its persona, channel and user)."""
        at = self.at
        if self.in_minutes is not None:
            if at is not None:
                raise InvalidInput("in_minutes", "give at or in_minutes, not both")
            at = (datetime.now(UTC) + timedelta(minutes=self.in_minutes)).isoformat()
        given = {"persona": ctx.persona, "channel": ctx.channel, "text": self.text, "at": at, "cron": self.cron}
        fields = {k: v for k, v in given.items() if v is not None}
        return parse(NewScheduleBody, {**fields, "timezone": self.timezone})


class ListToolArgs(Request):
    """``list_schedules``: the conversation user's schedules."""

    state: State | None = None

    def request(self) -> ScheduleQuery:
        """The query (at most :data:`TOOL_LIST_LIMIT`)."""
        return ScheduleQuery(state=self.state, limit=TOOL_LIST_LIMIT)


class CancelToolArgs(Request):
    """``cancel_schedule``: one of the conversation user's schedules."""

    id: int = Field(ge=1, le=MAX_ID, description="The schedule's id.")

    def request(self) -> ScheduleRef:
        """The schedule to cancel."""
        return ScheduleRef(id=self.id)


# -- the operations ------------------------------------------------------------------------------


def acting_for(ctx: OpContext, user: str | None) -> str | None:
    """The user a call is limited to: an admin's filter (optional), else the one user the caller
    acts for (the request's, else the conversation's; required)."""
    if ctx.role == ADMIN:
        return user
    if ctx.role == PERSONA:
        if not ctx.user or ctx.user.startswith("schedule:"):
            raise InvalidInput("user", "schedules belong to a user, and this conversation has none")
        if user is not None and user != ctx.user:
            raise Forbidden(f"a tool call acts for its conversation's user {ctx.user!r} only")
        return ctx.user
    if user is None:
        raise InvalidInput("user", f"a {ctx.role} key acts for one user: name it")
    return user


def _made_by(ctx: OpContext, user: str | None) -> str:
    """Who made a schedule, as stored: the CLI, a user (through a persona), the operator, a key."""
    if ctx.via == "cli":
        return "cli"
    if ctx.role == PERSONA:
        return f"user:{user}"
    return "local" if ctx.name == OPERATOR else f"key:{ctx.name}"


@operation("schedule_create", roles=ROLES)
def create(ctx: OpContext, request: NewScheduleBody) -> ScheduleOut:
    """Make a schedule: its persona takes a turn in ``channel`` at ``at``, or at each occurrence of
    ``cron`` in ``timezone``, triggered by ``text``."""
    user = acting_for(ctx, request.user)
    new = _checked(ctx.parts, request, user, _made_by(ctx, user))
    return ScheduleOut.of(schedules.make(ctx.parts.store, ctx.parts.config, new))


def _checked(parts: Parts, request: NewScheduleBody, user: str | None, created_by: str) -> NewSchedule:
    """The schedule to store, or :class:`~agentd.InvalidInput` naming the field and why
    (:class:`~agentd.NotFound` for an unknown persona). What the model's field types say
    (identifiers, a text that is not blank) is checked already."""
    persona = parts.personas[request.persona].name
    if DELEGATION_MARK in request.channel:
        raise InvalidInput("channel", "is a delegation's internal channel")
    limit = parts.config.runtime.max_message_chars
    if len(request.text) > limit:
        raise InvalidInput(
            "text", f"is {len(request.text)} characters; the limit is {limit} ([runtime] max_message_chars)"
        )
    # Typed ``str`` for the published schema (absent, never null): either may be missing.
    given_at: str | None = request.at
    given_cron: str | None = request.cron
    if (given_at is None) == (given_cron is None):
        field = "at" if given_at is None else "cron"
        raise InvalidInput(field, "give either at (one time) or cron (a recurrence), exactly one of them")
    now = datetime.now(UTC)
    where = (persona, request.channel, user, request.text)
    if given_cron is not None:
        tz = request.timezone or "UTC"
        zone(tz)
        cron = check_cron(given_cron)
        return NewSchedule(*where, next_occurrence(cron, tz, now), created_by, cron=cron, timezone=tz)
    if request.timezone is not None:
        zone(request.timezone)
    assert given_at is not None
    at = parse_at(given_at, now)
    return NewSchedule(*where, at, created_by, at=at, timezone=request.timezone)


@operation("schedule_list", roles=ROLES)
def list_schedules(ctx: OpContext, request: ScheduleQuery) -> ScheduleList:
    """Schedules, newest first, filtered as asked (a caller that is not an admin: its user's only)."""
    only = acting_for(ctx, request.user)
    found = schedules.listing(
        ctx.parts.store, state=request.state, persona=request.persona, user=only, limit=request.limit
    )
    return ScheduleList(schedules=[ScheduleOut.of(s) for s in found])


@operation("schedule_get", roles=ROLES)
def get(ctx: OpContext, request: ScheduleRef) -> ScheduleOut:
    """One schedule (another user's is ``not_found`` to a caller acting for one)."""
    return ScheduleOut.of(schedules.get(ctx.parts.store, request.id, acting_for(ctx, request.user)))


@operation("schedule_cancel", roles=ROLES)
def cancel(ctx: OpContext, request: ScheduleRef) -> ScheduleOut:
    """Cancel a schedule still to fire; the schedule as it is now (one already fired, missed or
    cancelled is left so)."""
    return ScheduleOut.of(schedules.cancel(ctx.parts.store, request.id, acting_for(ctx, request.user)))


__all__ = [
    "MAX_MINUTES",
    "CancelToolArgs",
    "ListToolArgs",
    "NewScheduleBody",
    "ScheduleList",
    "ScheduleOut",
    "ScheduleQuery",
    "ScheduleRef",
    "ScheduleToolArgs",
    "acting_for",
    "cancel",
    "create",
    "get",
    "list_schedules",
]
