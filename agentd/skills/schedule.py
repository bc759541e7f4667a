"""``schedule``: the model makes, lists and cancels the asking user's reminders and schedules.

Three tools: ``schedule`` (create: ``at`` or ``in_minutes`` for one time, ``cron`` + ``timezone``
for a recurrence), ``list_schedules`` and ``cancel_schedule``. Each is scoped to the user of the
turn: a user lists and cancels only their own. The checks are :mod:`agentd.timing.schedules`' (the API's
and the CLI's), so a bad time, cron or timezone is refused with the same words, as an
``InvalidInput`` tool result the model can read and correct.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentd._exceptions import InvalidInput, NotFound, SkillInvalidInput
from agentd.skills.registry import SkillCaller, SkillDeps, function_tool

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.personas import Personas
    from agentd.store import Store

#: The longest ``in_minutes`` a reminder may be set for (a year).
MAX_MINUTES = 366 * 24 * 60


def _user(ctx: SkillCaller) -> str:
    if not ctx.user or ctx.user.startswith("schedule:"):
        raise SkillInvalidInput("schedules belong to a user, and this conversation has none")
    return ctx.user


class _Base:
    def __init__(self, store: Store, config: Config, personas: Personas) -> None:
        self._store = store
        self._config = config
        self._personas = personas


class ScheduleTool(_Base):
    """``schedule(text, at | in_minutes | cron, timezone)``: a reminder or recurrence for the user."""

    name = "schedule"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return function_tool(
            self.name,
            "Schedule a message to yourself in this channel for this user: a reminder at one time "
            "(at, or in_minutes) or a recurrence (cron with timezone). When it is due you are given "
            "the text and answer it here.",
            {
                "text": {"type": "string", "description": "What to do or say then, e.g. 'Remind alice to stretch'."},
                "in_minutes": {"type": "number", "description": "Minutes from now (one time)."},
                "at": {"type": "string", "description": "ISO 8601 time with an offset (one time)."},
                "cron": {"type": "string", "description": "Five-field cron: minute hour day month weekday."},
                "timezone": {"type": "string", "description": "IANA timezone of cron (default UTC)."},
            },
            ["text"],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Create the schedule; a bad argument is ``InvalidInput`` naming it."""
        from agentd.timing.schedules import ScheduleRequest, make

        user = _user(ctx)
        at: str | datetime | None = arguments.get("at")
        minutes = arguments.get("in_minutes")
        if minutes is not None:
            if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not 0 < minutes <= MAX_MINUTES:
                raise SkillInvalidInput(f"in_minutes must be a number of minutes between 0 and {MAX_MINUTES}")
            if at is not None:
                raise SkillInvalidInput("give at or in_minutes, not both")
            at = datetime.now(UTC) + timedelta(minutes=minutes)
        text = arguments.get("text")
        request = ScheduleRequest(
            ctx.persona, ctx.channel, text if isinstance(text, str) else "", user, at,
            arguments.get("cron"), arguments.get("timezone"),
        )  # fmt: skip
        try:
            made = make(self._store, self._config, self._personas, request, f"user:{user}")
        except InvalidInput as exc:
            raise SkillInvalidInput(str(exc)) from exc
        return {"scheduled": made.as_json()}


class ListSchedulesTool(_Base):
    """``list_schedules(state)``: the user's schedules, newest first."""

    name = "list_schedules"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return function_tool(
            self.name,
            "List this user's schedules and reminders, newest first.",
            {"state": {"type": "string", "enum": ["scheduled", "fired", "missed", "cancelled"]}},
            [],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """The user's schedules (at most 50)."""
        from agentd.timing.schedules import listing

        state = arguments.get("state")
        try:
            found = listing(self._store, state=state, user=_user(ctx), limit=50)
        except InvalidInput as exc:
            raise SkillInvalidInput(str(exc)) from exc
        return {"schedules": [s.as_json() for s in found]}


class CancelScheduleTool(_Base):
    """``cancel_schedule(id)``: cancel one of the user's schedules."""

    name = "cancel_schedule"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return function_tool(
            self.name,
            "Cancel one of this user's schedules by its id (from list_schedules).",
            {"id": {"type": "integer", "description": "The schedule's id."}},
            ["id"],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Cancel it (only the user's own: another's is not found)."""
        from agentd.timing.schedules import cancel

        sid = arguments.get("id")
        if isinstance(sid, bool) or not isinstance(sid, int) or sid < 1:
            raise SkillInvalidInput("id must be a schedule's id (a positive integer)")
        try:
            found = cancel(self._store, sid, _user(ctx))
        except NotFound as exc:
            raise SkillInvalidInput(str(exc)) from exc
        return {"schedule": found.as_json()}


def schedule_skill(deps: SkillDeps) -> list[ScheduleTool | ListSchedulesTool | CancelScheduleTool] | None:
    """The three tools, where there is a store to keep schedules in."""
    if deps.store is None or deps.config is None:
        return None
    parts = (deps.store, deps.config, deps.personas)
    return [ScheduleTool(*parts), ListSchedulesTool(*parts), CancelScheduleTool(*parts)]


__all__ = ["CancelScheduleTool", "ListSchedulesTool", "ScheduleTool", "schedule_skill"]
