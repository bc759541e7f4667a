"""Tool calls and approvals: ``tool_calls`` (the audit trail) and ``approvals`` (calls waiting for an
owner), in SQL. A decision is a conditional update: an approval is decided once, whoever asks first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.schema import inserted_id

_A = schema.approvals
_C = schema.tool_calls
_M = schema.messages
#: The statuses of a user message whose turn is not over (pending, paused, or waiting behind one).
OPEN_STATUSES = ("pending", "awaiting_approval", "held")
#: The most characters of a result (or error) the audit trail keeps.
RESULT_CHARS = 2000
#: The states an approval ends in.
DECIDED = ("approved", "denied", "expired")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@dataclass(frozen=True)
class Approval:
    """One call waiting for (or given) an owner's decision."""

    id: int
    persona: str
    channel: str
    message_id: int
    request_id: str
    tool: str
    call_id: str
    arguments: str
    asked_by: str
    state: str
    decided_by: str | None
    reason: str | None
    resume: str
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    claimed_at: datetime | None
    done_at: datetime | None

    def as_json(self) -> dict[str, Any]:
        """What ``agentd approvals list --json`` and ``GET /v1/approvals`` show (not the conversation)."""
        return {
            "id": self.id,
            "persona": self.persona,
            "channel": self.channel,
            "message_id": self.message_id,
            "tool": self.tool,
            "arguments": _arguments(self.arguments),
            "asked_by": self.asked_by,
            "state": self.state,
            "decided_by": self.decided_by,
            "reason": self.reason,
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.expires_at),
            "decided_at": _iso(self.decided_at),
        }


@dataclass(frozen=True)
class ToolCallEntry:
    """One tool call as the audit trail keeps it."""

    id: int
    persona: str
    channel: str
    message_id: int | None
    asked_by: str | None
    tool: str
    arguments: str
    approval: str
    approval_id: int | None
    decided_by: str | None
    outcome: str
    result: str
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``agentd tools log --json``, an export)."""
        return {
            "id": self.id,
            "persona": self.persona,
            "channel": self.channel,
            "message_id": self.message_id,
            "asked_by": self.asked_by,
            "tool": self.tool,
            "arguments": _arguments(self.arguments),
            "approval": self.approval,
            "approval_id": self.approval_id,
            "decided_by": self.decided_by,
            "outcome": self.outcome,
            "result": self.result,
            "created_at": _iso(self.created_at),
        }


class ApprovalRepo:
    """SQL for ``approvals``."""

    def add(self, conn: sa.Connection, **values: Any) -> int:
        """Store a pending approval (every column but the decision's); its id."""
        return inserted_id(conn.execute(sa.insert(_A).values(state="pending", **values)))

    def get(self, conn: sa.Connection, approval_id: int) -> Approval | None:
        """One approval, or None."""
        row = conn.execute(sa.select(_A).where(_A.c.id == approval_id)).first()
        return None if row is None else Approval(**row._mapping)

    def listed(
        self, conn: sa.Connection, state: str | None = None, persona: str | None = None, limit: int = 1000
    ) -> list[Approval]:
        """Approvals (in ``state``, of ``persona``, if given), newest first."""
        query = sa.select(_A).order_by(_A.c.id.desc()).limit(limit)
        if state is not None:
            query = query.where(_A.c.state == state)
        if persona is not None:
            query = query.where(_A.c.persona == persona)
        return [Approval(**r._mapping) for r in conn.execute(query)]

    def decide(
        self, conn: sa.Connection, approval_id: int, state: str, by: str | None, reason: str | None, now: datetime
    ) -> bool:
        """Decide a pending approval; False when it was decided already (decided once)."""
        done = conn.execute(
            sa.update(_A)
            .where(_A.c.id == approval_id, _A.c.state == "pending")
            .values(state=state, decided_by=by, reason=reason, decided_at=now)
        )
        return done.rowcount == 1

    def due(self, conn: sa.Connection, now: datetime) -> list[int]:
        """The pending approvals whose time ran out."""
        query = sa.select(_A.c.id).where(_A.c.state == "pending", _A.c.expires_at <= now).order_by(_A.c.id)
        return [int(i) for i in conn.execute(query).scalars()]

    def claimable(self, conn: sa.Connection) -> list[Approval]:
        """Decided approvals whose turn no daemon has re-enqueued yet, oldest first."""
        query = sa.select(_A).where(_A.c.state.in_(DECIDED), _A.c.claimed_at.is_(None)).order_by(_A.c.id)
        return [Approval(**r._mapping) for r in conn.execute(query)]

    def claim(self, conn: sa.Connection, approval_id: int, now: datetime) -> bool:
        """Take a decided approval's turn to re-enqueue; False when another daemon took it."""
        done = conn.execute(
            sa.update(_A).where(_A.c.id == approval_id, _A.c.claimed_at.is_(None)).values(claimed_at=now)
        )
        return done.rowcount == 1

    def holding(self, conn: sa.Connection, persona: str, channel: str, message_id: int) -> Approval | None:
        """The oldest approval of ``persona`` in ``channel`` at or before ``message_id`` whose turn has
        not used it yet: the channel's later messages wait behind it."""
        # An approval whose turn ended some other way (failed, erased) holds nothing.
        query = (
            sa.select(_A)
            .join(_M, _M.c.id == _A.c.message_id)
            .where(
                _A.c.persona == persona,
                _A.c.channel == channel,
                _A.c.message_id <= message_id,
                _A.c.done_at.is_(None),
                _M.c.status.in_(OPEN_STATUSES),
            )
            .order_by(_A.c.message_id, _A.c.id)
            .limit(1)
        )
        row = conn.execute(query).first()
        return None if row is None else Approval(**row._mapping)

    def held_before(self, conn: sa.Connection, persona: str, channel: str, message_id: int) -> bool:
        """True when an earlier message to ``persona`` in ``channel`` is ``held`` (a later one waits
        behind it too, so the channel's order holds when they are released)."""
        query = sa.select(_M.c.id).where(
            _M.c.channel == channel, _M.c.persona == persona, _M.c.status == "held", _M.c.id < message_id
        )
        return conn.execute(query.limit(1)).first() is not None

    def move(self, conn: sa.Connection, message_id: int, old: str, new: str) -> bool:
        """Set a user message's status from ``old`` to ``new``; False when it was not ``old``."""
        done = conn.execute(sa.update(_M).where(_M.c.id == message_id, _M.c.status == old).values(status=new))
        return done.rowcount == 1

    def done(self, conn: sa.Connection, approval_id: int, now: datetime) -> None:
        """The resumed turn used the decision."""
        conn.execute(sa.update(_A).where(_A.c.id == approval_id).values(done_at=now))


class ToolCallRepo:
    """SQL for ``tool_calls``."""

    def add(self, conn: sa.Connection, **values: Any) -> int:
        """Keep one call (its result cut to :data:`RESULT_CHARS`)."""
        values["result"] = str(values.get("result", ""))[:RESULT_CHARS]
        return inserted_id(conn.execute(sa.insert(_C).values(**values)))

    def log(
        self, conn: sa.Connection, persona: str | None = None, user: str | None = None, limit: int = 100
    ) -> list[ToolCallEntry]:
        """The newest calls (of ``persona``, triggered by ``user``, if given), newest first."""
        query = sa.select(_C).order_by(_C.c.id.desc()).limit(limit)
        if persona is not None:
            query = query.where(_C.c.persona == persona)
        if user is not None:
            query = query.where(_C.c.asked_by == user)
        return [ToolCallEntry(**r._mapping) for r in conn.execute(query)]

    def for_messages(self, conn: sa.Connection, message_ids: Sequence[int]) -> list[ToolCallEntry]:
        """The calls of the turns answering ``message_ids``, oldest first."""
        if not message_ids:
            return []
        query = sa.select(_C).where(_C.c.message_id.in_(list(message_ids))).order_by(_C.c.id)
        return [ToolCallEntry(**r._mapping) for r in conn.execute(query)]


__all__ = ["DECIDED", "OPEN_STATUSES", "RESULT_CHARS", "Approval", "ApprovalRepo", "ToolCallEntry", "ToolCallRepo"]
