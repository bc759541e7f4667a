"""Schedules: rows in ``schedules``, each a persona's turn in a channel at a time or a recurrence.

The scheduler (:mod:`agentd.runtime.scheduler`) reads the next due time (:meth:`ScheduleRepo.next_due`),
takes the due rows (:meth:`ScheduleRepo.due`: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two
daemons never take the same row) and moves each on with a conditional update
(:meth:`ScheduleRepo.advance`: only from the state and due time it read), in the transaction
that stores the firing's trigger message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.schema import inserted_id, utcnow

_S = schema.schedules
#: The states a schedule can be in.
STATES = ("scheduled", "fired", "missed", "cancelled")
#: The author of a schedule's trigger messages is this and its id (``schedule:7``).
AUTHOR_PREFIX = "schedule:"
#: The earliest due time of the schedules still to fire (built once: the scheduler asks it each wake).
_NEXT_DUE = sa.select(sa.func.min(_S.c.next_at)).where(_S.c.state == "scheduled")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Schedule:
    """One stored schedule."""

    id: int
    persona: str
    channel: str
    user: str | None
    text: str
    at: datetime | None
    cron: str | None
    timezone: str | None
    next_at: datetime | None
    state: str
    created_by: str
    created_at: datetime
    last_fired_at: datetime | None
    fired_count: int
    last_message_id: int | None
    routine: str | None

    @property
    def author(self) -> str:
        """Who its firings' trigger messages are from."""
        return f"{AUTHOR_PREFIX}{self.id}"

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the API's and ``--json``'s fields)."""
        return {
            "id": self.id,
            "persona": self.persona,
            "channel": self.channel,
            "user": self.user,
            "text": self.text,
            "at": _iso(self.at),
            "cron": self.cron,
            "timezone": self.timezone,
            "next_at": _iso(self.next_at),
            "state": self.state,
            "created_by": self.created_by,
            "created_at": _iso(self.created_at),
            "last_fired_at": _iso(self.last_fired_at),
            "fired_count": self.fired_count,
            "last_message_id": self.last_message_id,
            "routine": self.routine,
        }


def _schedule(row: sa.Row[Any]) -> Schedule:
    m = row._mapping
    return Schedule(
        id=int(m["id"]),
        persona=m["persona"],
        channel=m["channel"],
        user=m["user_id"],
        text=m["text"],
        at=m["at"],
        cron=m["cron"],
        timezone=m["timezone"],
        next_at=m["next_at"],
        state=m["state"],
        created_by=m["created_by"],
        created_at=m["created_at"],
        last_fired_at=m["last_fired_at"],
        fired_count=int(m["fired_count"] or 0),
        last_message_id=m["last_message_id"],
        routine=m["routine"],
    )


@dataclass(frozen=True)
class NewSchedule:
    """A schedule to store (already checked: :mod:`agentd.timing.schedules`)."""

    persona: str
    channel: str
    user: str | None
    text: str
    next_at: datetime
    created_by: str
    at: datetime | None = None
    cron: str | None = None
    timezone: str | None = None
    routine: str | None = None


class ScheduleRepo:
    """SQL for schedules. Every query is bounded by a LIMIT and an index."""

    def add(self, conn: sa.Connection, new: NewSchedule) -> Schedule:
        """Store a schedule (``scheduled``)."""
        values = {
            "persona": new.persona,
            "channel": new.channel,
            "user_id": new.user,
            "text": new.text,
            "at": new.at,
            "cron": new.cron,
            "timezone": new.timezone,
            "next_at": new.next_at,
            "state": "scheduled",
            "created_by": new.created_by,
            "created_at": utcnow(),
            "fired_count": 0,
            "routine": new.routine,
        }
        sid = inserted_id(conn.execute(sa.insert(_S).values(**values)))
        found = self.get(conn, sid)
        assert found is not None
        return found

    def get(self, conn: sa.Connection, schedule_id: int) -> Schedule | None:
        """One schedule by id."""
        row = conn.execute(sa.select(_S).where(_S.c.id == schedule_id)).first()
        return None if row is None else _schedule(row)

    def find(
        self,
        conn: sa.Connection,
        *,
        state: str | None = None,
        persona: str | None = None,
        user: str | None = None,
        limit: int = 200,
    ) -> list[Schedule]:
        """Schedules, newest first, in ``state`` / of ``persona`` / for ``user`` when given."""
        query = sa.select(_S)
        if state is not None:
            query = query.where(_S.c.state == state)
        if persona is not None:
            query = query.where(_S.c.persona == persona)
        if user is not None:
            query = query.where(_S.c.user_id == user)
        return [_schedule(r) for r in conn.execute(query.order_by(_S.c.id.desc()).limit(limit))]

    def active_count(self, conn: sa.Connection, user: str) -> int:
        """How many schedules ``user`` has still to fire."""
        query = sa.select(sa.func.count()).select_from(_S).where(_S.c.user_id == user, _S.c.state == "scheduled")
        return int(conn.execute(query).scalar_one())

    def cancel(self, conn: sa.Connection, schedule_id: int) -> bool:
        """``scheduled`` → ``cancelled``; False when it was not scheduled (fired, missed, cancelled)."""
        result = conn.execute(
            sa.update(_S)
            .where(_S.c.id == schedule_id, _S.c.state == "scheduled")
            .values(state="cancelled", next_at=None)
        )
        return result.rowcount == 1

    def next_due(self, conn: sa.Connection) -> datetime | None:
        """When the earliest schedule still to fire is due (``None``: none is)."""
        found: datetime | None = conn.execute(_NEXT_DUE).scalar_one_or_none()
        return None if found is None else schema.UTCDateTime().process_result_value(found, conn.dialect)

    def due(self, conn: sa.Connection, now: datetime, limit: int) -> list[Schedule]:
        """Up to ``limit`` schedules due at ``now``, the most overdue first. On PostgreSQL the rows are
        locked for this transaction and rows another transaction holds are skipped (``SKIP LOCKED``):
        two daemons never take the same one."""
        query = (
            sa.select(_S)
            .where(_S.c.state == "scheduled", _S.c.next_at <= now)
            .order_by(_S.c.next_at, _S.c.id)
            .limit(limit)
        )
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        return [_schedule(r) for r in conn.execute(query)]

    def advance(
        self,
        conn: sa.Connection,
        schedule: Schedule,
        *,
        next_at: datetime | None,
        state: str,
        fired_at: datetime | None = None,
        message_id: int | None = None,
    ) -> bool:
        """Move ``schedule`` on from the state and due time it was read with (a conditional update: a
        firing another writer claimed first leaves it alone); False when it had moved already."""
        values: dict[str, Any] = {"next_at": next_at, "state": state}
        if fired_at is not None:
            values.update(last_fired_at=fired_at, fired_count=_S.c.fired_count + 1)
            if message_id is not None:
                values["last_message_id"] = message_id
        result = conn.execute(
            sa.update(_S)
            .where(_S.c.id == schedule.id, _S.c.state == "scheduled", _S.c.next_at == schedule.next_at)
            .values(**values)
        )
        return result.rowcount == 1

    def set_message(self, conn: sa.Connection, schedule_id: int, message_id: int) -> None:
        """Record the trigger message of a schedule's last firing."""
        conn.execute(sa.update(_S).where(_S.c.id == schedule_id).values(last_message_id=message_id))

    def routines(self, conn: sa.Connection, persona: str) -> list[Schedule]:
        """The schedules that mirror ``persona``'s ``[[routines]]`` (every state)."""
        query = sa.select(_S).where(_S.c.persona == persona, _S.c.routine.is_not(None)).limit(1000)
        return [_schedule(r) for r in conn.execute(query)]

    def replace_routine(self, conn: sa.Connection, old: Schedule | None, new: NewSchedule | None) -> None:
        """Bring one routine in step with its persona file: drop the ``old`` row, add the ``new`` one."""
        if old is not None:
            conn.execute(sa.delete(_S).where(_S.c.id == old.id))
        if new is not None:
            self.add(conn, new)

    def delete_user(self, conn: sa.Connection, user: str, personas: Sequence[str] | None = None) -> int:
        """Delete ``user``'s schedules (of ``personas`` only, when given); how many."""
        query = sa.delete(_S).where(_S.c.user_id == user)
        if personas is not None:
            query = query.where(_S.c.persona.in_(list(personas)))
        return int(conn.execute(query).rowcount or 0)


__all__ = ["STATES", "NewSchedule", "Schedule", "ScheduleRepo"]
