"""Where each background job has got to in each channel, and the history of memories it changed.

A background job (:mod:`agentd.memory.background`) works through a channel's
exchanges in id order. Its cursor (``job_cursors``) is the last user message it
finished with; the job writes its results and moves the cursor in one
transaction, so after a crash it resumes exactly where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.engine import insert_for
from agentd.store.schema import inserted_id, utcnow

_J = schema.job_cursors
_H = schema.memory_history
_M = schema.messages
_CURSOR = sa.select(_J.c.last_message_id).where(
    _J.c.job == sa.bindparam("job"), _J.c.channel == sa.bindparam("channel")
)
_MOVE = (
    sa.update(_J)
    .where(
        _J.c.job == sa.bindparam("b_job"),
        _J.c.channel == sa.bindparam("b_channel"),
        _J.c.last_message_id == sa.bindparam("start"),
    )
    .values(last_message_id=sa.bindparam("last"), updated_at=sa.bindparam("at"))
    .returning(_J.c.job)
)


class CursorRepo:
    """SQL for ``job_cursors``."""

    def get(self, conn: sa.Connection, job: str, channel: str) -> int:
        """The last user message ``job`` finished with in ``channel`` (0: none yet)."""
        found = conn.execute(_CURSOR, {"job": job, "channel": channel}).scalar_one_or_none()
        return int(found or 0)

    def advance(self, conn: sa.Connection, job: str, channel: str, start: int, last_message_id: int) -> bool:
        """Move ``job``'s cursor in ``channel`` from ``start`` to ``last_message_id``, atomically;
        False (and nothing moved) if it is no longer at ``start``: another worker did that batch.

        Call it first in the transaction that writes the batch's results, and write them only
        if it returned True. The conditional update takes the row's lock, so of two daemons
        finishing the same batch on PostgreSQL the second waits for the first to commit and then
        finds the cursor moved (a plain read-then-write would let both commit their results);
        a first batch inserts the row, and a concurrent insert of it does nothing.
        """
        now = utcnow()
        # RETURNING, not rowcount: the PostgreSQL driver reports -1 for an INSERT ... ON CONFLICT.
        if start:
            params = {"b_job": job, "b_channel": channel, "start": start, "last": last_message_id, "at": now}
            moved = conn.execute(_MOVE, params).first()
            return moved is not None
        insert = insert_for(conn)
        values = {"job": job, "channel": channel, "last_message_id": last_message_id, "updated_at": now}
        added = conn.execute(insert(_J).values(**values).on_conflict_do_nothing().returning(_J.c.job)).first()
        return added is not None

    def behind(self, conn: sa.Connection, job: str) -> list[str]:
        """Channels with a user message newer than ``job``'s cursor there (catch-up after a start)."""
        newest = (
            sa.select(_M.c.channel, sa.func.max(_M.c.id).label("newest"))
            .where(_M.c.role == "user")
            .group_by(_M.c.channel)
            .subquery()
        )
        query = (
            sa.select(newest.c.channel)
            .select_from(newest.outerjoin(_J, sa.and_(_J.c.channel == newest.c.channel, _J.c.job == job)))
            .where(newest.c.newest > sa.func.coalesce(_J.c.last_message_id, 0))
            .order_by(newest.c.channel)
        )
        return [str(r[0]) for r in conn.execute(query)]


@dataclass(frozen=True)
class Revision:
    """One revision of a memory: a recorded change to its text (a row of ``memory_history``)."""

    id: int
    memory_id: int
    persona: str
    scope: str
    event: str
    old_text: str | None
    new_text: str | None
    reason: str
    source_message_id: int | None
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "id": self.id,
            "memory_id": self.memory_id,
            "persona": self.persona,
            "scope": self.scope,
            "event": self.event,
            "old_text": self.old_text,
            "new_text": self.new_text,
            "reason": self.reason,
            "source_message_id": self.source_message_id,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
        }


class MemoryHistoryRepo:
    """SQL for ``memory_history``."""

    def add(
        self,
        conn: sa.Connection,
        *,
        memory_id: int,
        persona: str,
        scope: str,
        event: str,
        old_text: str | None,
        new_text: str | None,
        reason: str,
        source_message_id: int | None,
    ) -> int:
        """Record one change."""
        return inserted_id(
            conn.execute(
                sa.insert(_H).values(
                    memory_id=memory_id,
                    persona=persona,
                    scope=scope,
                    event=event,
                    old_text=old_text,
                    new_text=new_text,
                    reason=reason,
                    source_message_id=source_message_id,
                    created_at=utcnow(),
                )
            )
        )

    def of(self, conn: sa.Connection, memory_id: int) -> list[Revision]:
        """A memory's changes, oldest first."""
        rows = conn.execute(sa.select(_H).where(_H.c.memory_id == memory_id).order_by(_H.c.id))
        return [Revision(**{k: r._mapping[k] for k in Revision.__dataclass_fields__}) for r in rows]
