"""``schedule``: the model makes, lists and cancels the asking user's reminders and schedules.

Three tools: ``schedule`` (create: ``at`` or ``in_minutes`` for one time, ``cron`` + ``timezone``
for a recurrence), ``list_schedules`` and ``cancel_schedule``: thin adapters over the operations
of :mod:`agentd.ops.schedules` (the API's and the CLI's), acting for the user of the turn: a
user lists and cancels only their own. A bad time, cron or timezone is refused with the API's
words, as an ``InvalidInput`` tool result the model can read and correct.
"""

from __future__ import annotations

from typing import Any

from agentd.ops import schedules as ops
from agentd.skills.acting import arguments, as_tool_error, op_context, tool_definition
from agentd.skills.registry import SkillCaller, SkillDeps


class _Base:
    def __init__(self, deps: SkillDeps) -> None:
        self._deps = deps


class ScheduleTool(_Base):
    """``schedule(text, at | in_minutes | cron, timezone)``: a reminder or recurrence for the user."""

    name = "schedule"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return tool_definition(
            self.name,
            "Schedule a message to yourself in this channel for this user: a reminder at one time "
            "(at, or in_minutes) or a recurrence (cron with timezone). When it is due you are given "
            "the text and answer it here.",
            ops.ScheduleArgs,
        )

    def run(self, arguments_: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Create the schedule; a bad argument is ``InvalidInput`` naming it."""
        asked = arguments(ops.ScheduleArgs, arguments_)
        who = op_context(self._deps, ctx)
        made = as_tool_error(lambda: ops.create(who, asked.to_request(who)))
        return {"scheduled": made.as_json()}


class ListSchedulesTool(_Base):
    """``list_schedules(state)``: the user's schedules, newest first."""

    name = "list_schedules"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return tool_definition(
            self.name, "List this user's schedules and reminders, newest first.", ops.ListSchedulesArgs
        )

    def run(self, arguments_: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """The user's schedules (at most 50)."""
        asked = arguments(ops.ListSchedulesArgs, arguments_)
        found = as_tool_error(lambda: ops.list_schedules(op_context(self._deps, ctx), asked.to_request()))
        return {"schedules": [s.as_json() for s in found.schedules]}


class CancelScheduleTool(_Base):
    """``cancel_schedule(id)``: cancel one of the user's schedules."""

    name = "cancel_schedule"

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return tool_definition(
            self.name, "Cancel one of this user's schedules by its id (from list_schedules).", ops.CancelScheduleArgs
        )

    def run(self, arguments_: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Cancel it (only the user's own: another's is not found)."""
        asked = arguments(ops.CancelScheduleArgs, arguments_)
        found = as_tool_error(lambda: ops.cancel(op_context(self._deps, ctx), asked.to_request()))
        return {"schedule": found.as_json()}


def schedule_skill(deps: SkillDeps) -> list[ScheduleTool | ListSchedulesTool | CancelScheduleTool] | None:
    """The three tools, where there is a store to keep schedules in."""
    if deps.store is None or deps.config is None:
        return None
    return [ScheduleTool(deps), ListSchedulesTool(deps), CancelScheduleTool(deps)]


__all__ = ["CancelScheduleTool", "ListSchedulesTool", "ScheduleTool", "schedule_skill"]
