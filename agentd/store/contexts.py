"""Context records: what each reply was given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.schema import inserted_id, utcnow

_T = schema.context_records
_INSERT = sa.insert(_T)


@dataclass(frozen=True)
class StoredRecord:
    """The memories, history, budget, model and usage behind one reply."""

    id: int
    reply_id: int
    user_message_id: int | None
    persona: str
    channel: str
    model: str
    data: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class UsageRow:
    """The model usage one context record holds: its reply's, and any extraction calls' since."""

    created_at: datetime
    persona: str
    channel: str
    model: str
    #: ``{"prompt_tokens", "completion_tokens", ...}`` of the reply's model calls.
    usage: dict[str, Any]
    #: ``[{"model", "usage"}]``: the extraction calls made on this exchange (``[memory] extract``).
    extraction: list[dict[str, Any]]


class ContextRepo:
    """SQL for context records."""

    def add(
        self,
        conn: sa.Connection,
        *,
        reply_id: int,
        user_message_id: int | None,
        persona: str,
        channel: str,
        model: str,
        data: dict[str, Any],
    ) -> int:
        """Record what reply ``reply_id`` was given."""
        return inserted_id(
            conn.execute(
                _INSERT,
                {
                    "reply_id": reply_id,
                    "user_message_id": user_message_id,
                    "persona": persona,
                    "channel": channel,
                    "model": model,
                    "data": data,
                    "created_at": utcnow(),
                },
            )
        )

    def add_many(self, conn: sa.Connection, records: Sequence[Mapping[str, Any]]) -> None:
        """Record what several replies were given (each as :meth:`add`'s keyword arguments), in one statement."""
        if records:
            now = utcnow()
            conn.execute(_INSERT, [{**r, "created_at": now} for r in records])

    def for_message(self, conn: sa.Connection, message_id: int) -> StoredRecord | None:
        """The record of a reply, looked up by the reply's id or by the user message it answers."""
        row = conn.execute(
            sa.select(_T)
            .where(sa.or_(_T.c.reply_id == message_id, _T.c.user_message_id == message_id))
            .order_by(_T.c.id)
        ).first()
        if row is None:
            return None
        m = row._mapping
        return StoredRecord(
            id=m["id"],
            reply_id=m["reply_id"],
            user_message_id=m["user_message_id"],
            persona=m["persona"],
            channel=m["channel"],
            model=m["model"],
            data=m["data"],
            created_at=m["created_at"],
        )

    def for_replies(self, conn: sa.Connection, reply_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """``{reply id: the record's data and its ``model``}`` for these replies (a page's worth: one query)."""
        if not reply_ids:
            return {}
        rows = conn.execute(sa.select(_T.c.reply_id, _T.c.model, _T.c.data).where(_T.c.reply_id.in_(list(reply_ids))))
        return {int(r[0]): {"model": r[1], **dict(r[2] or {})} for r in rows}

    def add_extraction(self, conn: sa.Connection, reply_id: int, model: str, usage: Mapping[str, int]) -> bool:
        """Note on reply ``reply_id``'s record one extraction call's model and usage (False: no record)."""
        row = conn.execute(sa.select(_T.c.id, _T.c.data).where(_T.c.reply_id == reply_id)).first()
        if row is None:
            return False
        data = dict(row.data)
        data["extraction"] = [*(data.get("extraction") or []), {"model": model, "usage": dict(usage)}]
        conn.execute(sa.update(_T).where(_T.c.id == row.id).values(data=data))
        return True

    def usage(self, conn: sa.Connection, persona: str | None = None, since: datetime | None = None) -> list[UsageRow]:
        """The usage every record (of ``persona``, created at or after ``since``) holds, oldest first."""
        query = sa.select(
            _T.c.created_at, _T.c.persona, _T.c.channel, _T.c.model, _T.c.data["usage"], _T.c.data["extraction"]
        ).order_by(_T.c.id)
        if persona is not None:
            query = query.where(_T.c.persona == persona)
        if since is not None:
            query = query.where(_T.c.created_at >= since)
        return [UsageRow(r[0], r[1], r[2], r[3], dict(r[4] or {}), list(r[5] or [])) for r in conn.execute(query)]
