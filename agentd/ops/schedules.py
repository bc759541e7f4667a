"""Schedules: make, list, get and cancel one, whoever asks (HTTP, the CLI, the model's tools).

Each is one operation over the checks of :mod:`agentd.timing.schedules` (a bad ``at``, ``cron`` or
``timezone`` is :class:`~agentd.InvalidInput` naming the field). Who may reach which schedules
is decided here, once: an admin (a key's, or the operator's in process) reaches every schedule
and may filter by ``user``; any other caller acts for one user, named in the request or given
by the conversation (a persona's tool call acts for the user it answers), and reaches only that
user's schedules (another's is ``not_found``, as if it did not exist).
"""

from __future__ import annotations

from datetime import UTC, datetime

from agentd._exceptions import Forbidden, InvalidInput
from agentd.access.scopes import DELEGATION_MARK
from agentd.ops.base import ADMIN, OPERATOR, PERSONA, SERVICE, OpContext, Parts, operation
from agentd.ops.models import (
    MAX_MINUTES,
    TOOL_LIST_LIMIT,
    CancelScheduleArgs,
    ListSchedulesArgs,
    NewScheduleBody,
    ScheduleArgs,
    ScheduleList,
    ScheduleOut,
    ScheduleQuery,
    ScheduleRef,
    ScheduleState,
)
from agentd.store.schedules import NewSchedule
from agentd.timing import schedules
from agentd.timing.recurrence import check_cron, next_occurrence, parse_at, zone

#: Who may reach schedules: an admin (all), a service key and a persona's tool call (one user's).
ROLES = (ADMIN, SERVICE, PERSONA)
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
    "TOOL_LIST_LIMIT",
    "CancelScheduleArgs",
    "ListSchedulesArgs",
    "NewScheduleBody",
    "ScheduleArgs",
    "ScheduleList",
    "ScheduleOut",
    "ScheduleQuery",
    "ScheduleRef",
    "ScheduleState",
    "acting_for",
    "cancel",
    "create",
    "get",
    "list_schedules",
]
