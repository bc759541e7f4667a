"""Channels and their messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd._exceptions import AlreadyAnswered
from agentd.store import schema
from agentd.store.engine import driver_sql, insert_for
from agentd.store.schema import id_chunks, inserted_id, utcnow

_C = schema.channels
_M = schema.messages

#: The predicate of the unique index ``uq_messages_one_reply`` (PostgreSQL). Literal SQL: with bound
#: parameters a prepared statement's generic plan cannot prove it matches the index.
_ONE_REPLY = sa.text("role = 'assistant' AND status = 'complete'")
#: Roles that make up a channel's conversation (what history is built from).
CONVERSATION_ROLES = ("user", "assistant")
#: The role of a room's call on a persona to answer a stored message (a person's, when several
#: personas answer it; a persona's reply naming another): not part of the conversation, answered
#: as a user message is (``pending`` until answered). Its ``source`` says which:
TRIGGER = "trigger"
#: ... a persona's reply called on another (counted against ``max_persona_turns``);
CHAIN_SOURCE = "persona"
#: ... the next persona answers a message several answer.
QUEUE_SOURCE = "room"
#: Roles answered by a turn.
ANSWERED_ROLES = ("user", TRIGGER)
#: The stored option naming who a message is for when its author is not a person (a schedule's
#: firing, from ``schedule:<id>``, is in its user's words and recalls that user's memories).
FOR_USER = "for_user"

#: A conversation message as the prompt's history reads it (the assembler's hot path: a plain tuple):
#: ``(id, role, content, token count, its tokenizer, author)``.
HistoryRow = tuple[int, str, str, int | None, str | None, str]
#: Replies stored after a turn's message to messages before it, read for its prompt at most.
LATE_REPLIES = 200

# The statements of a turn's hot path, built once with bound parameters. Building an expression
# and its cache key costs several times what SQLite takes to run it (bench/daemon.py's floor).
_B = sa.bindparam
_VISIBILITY = sa.select(_C.c.visibility, _C.c.owner).where(_C.c.name == _B("name"))
_CHANNEL_COUNT = sa.select(_C.c.message_count, _C.c.erasures).where(_C.c.name == _B("channel"))
_COUNT_ONE_MORE = sa.update(_C).where(_C.c.name == _B("channel")).values(message_count=_C.c.message_count + 1)
_NEWER = (
    sa.select(sa.func.count())
    .select_from(_M)
    .where(_M.c.channel == _B("channel"), _M.c.id >= _B("before_id"), _M.c.role.in_(CONVERSATION_ROLES))
)
_RECENT = (
    sa.select(_M)
    .where(_M.c.channel == _B("channel"), _M.c.role.in_(CONVERSATION_ROLES))
    .order_by(_M.c.id.desc())
    .limit(_B("limit"))
)
_RECENT_BEFORE = _RECENT.where(_M.c.id < _B("before_id"))
_AFTER = (
    sa.select(_M)
    .where(_M.c.channel == _B("channel"), _M.c.id > _B("after_id"), _M.c.role.in_(CONVERSATION_ROLES))
    .order_by(_M.c.id)
    .limit(_B("limit"))
)
_REPLIES = sa.select(_M).where(_M.c.reply_to.in_(_B("ids", expanding=True)), _M.c.role == "assistant").order_by(_M.c.id)
_REPLIES_IN = _REPLIES.where(_M.c.status == _B("status"))
_STATUSES = sa.select(_M.c.id, _M.c.status).where(_M.c.id.in_(_B("ids", expanding=True)))
_ASKERS = sa.select(_M.c.id, _M.c.author, _M.c.options).where(_M.c.id.in_(_B("ids", expanding=True)))
_SET_STATUS = sa.update(_M).where(_M.c.id == _B("mid")).values(status=_B("new_status"))
_SET_STATUS_UNLESS = _SET_STATUS.where(_M.c.status != _B("unless"))
_INSERT = sa.insert(_M)
_INSERT_MANY = sa.insert(_M).returning(_M.c.id, sort_by_parameter_order=True)
_COUNT_MORE = sa.update(_C).where(_C.c.name == _B("c")).values(message_count=_C.c.message_count + _B("n"))
_LAST_PERSON = sa.select(sa.func.max(_M.c.id)).where(_M.c.channel == _B("channel"), _M.c.role == "user")
_CHAIN = (
    sa.select(sa.func.count())
    .select_from(_M)
    .where(
        _M.c.channel == _B("channel"),
        _M.c.id > _B("after_id"),
        _M.c.role == TRIGGER,
        _M.c.source == CHAIN_SOURCE,
    )
)
_LAST_ANSWERER = (
    sa.select(_M.c.persona)
    .where(_M.c.channel == _B("channel"), _M.c.role == "user", _M.c.persona.is_not(None))
    .order_by(_M.c.id.desc())
    .limit(1)
)
#: ``INSERT … ON CONFLICT DO NOTHING`` of a channel row, per dialect (made on first use).
_ENSURE: dict[str, Any] = {}
#: The same with every column given (executemany over a batch's channels), per dialect.
_ENSURE_MANY: dict[str, Any] = {}


@dataclass(frozen=True)
class Message:
    """One stored message."""

    id: int
    channel: str
    persona: str | None
    role: str
    author: str
    content: str
    source: str
    status: str
    reply_to: int | None
    request_id: str | None
    token_count: int | None
    token_counter: str | None
    options: dict[str, Any]
    created_at: datetime

    @property
    def asker(self) -> str:
        """Who a user message's turn answers: its author, or the user it was stored for."""
        return asker(self.options, self.author)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "id": self.id,
            "channel": self.channel,
            "persona": self.persona,
            "role": self.role,
            "author": self.author,
            "content": self.content,
            "source": self.source,
            "status": self.status,
            "reply_to": self.reply_to,
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
        }


def asker(options: Mapping[str, Any] | None, author: str) -> str:
    """Who a user message with these stored ``options`` and ``author`` is for (see :data:`FOR_USER`)."""
    return str((options or {}).get(FOR_USER) or author)


def _history_rows(rows: Sequence[Any]) -> list[HistoryRow]:
    """The :data:`HistoryRow` of each fetched row whose first six columns are its fields."""
    return [(int(r[0]), str(r[1]), str(r[2]), r[3], r[4], str(r[5])) for r in rows]


def _message(row: sa.Row[Any]) -> Message:
    m = row._mapping
    return Message(
        id=m["id"],
        channel=m["channel"],
        persona=m["persona"],
        role=m["role"],
        author=m["author"],
        content=m["content"],
        source=m["source"],
        status=m["status"],
        reply_to=m["reply_to"],
        request_id=m["request_id"],
        token_count=m["token_count"],
        token_counter=m["token_counter"],
        options=m["options"] or {},
        created_at=m["created_at"],
    )


class MessageRepo:
    """SQL for channels and messages. Every query is bounded by a LIMIT and an index."""

    def ensure_channel(self, conn: sa.Connection, name: str) -> None:
        """Create the channel row if it does not exist yet."""
        stmt = _ENSURE.get(conn.dialect.name)
        if stmt is None:
            stmt = insert_for(conn)(_C).values(name=_B("new_name"), created_at=_B("at")).on_conflict_do_nothing()
            _ENSURE[conn.dialect.name] = stmt
        conn.execute(stmt, {"new_name": name, "at": utcnow()})

    def declare(self, conn: sa.Connection, name: str, visibility: str, owner: str | None) -> None:
        """Record a channel's visibility (and the user of a direct one) unless one was declared already.

        The first declaration stands: a later post cannot turn a shared channel direct.
        """
        self.ensure_channel(conn, name)
        conn.execute(
            sa.update(_C).where(_C.c.name == name, _C.c.visibility.is_(None)).values(visibility=visibility, owner=owner)
        )

    def visibility(self, conn: sa.Connection, name: str) -> tuple[str | None, str | None]:
        """``(visibility, owner)`` as declared (``(None, None)``: never declared, or no such channel)."""
        row = conn.execute(_VISIBILITY, {"name": name}).first()
        return (None, None) if row is None else (row.visibility, row.owner)

    def add(
        self,
        conn: sa.Connection,
        *,
        channel: str,
        role: str,
        author: str,
        content: str,
        status: str,
        persona: str | None = None,
        source: str = "chat",
        reply_to: int | None = None,
        request_id: str | None = None,
        token_count: int | None = None,
        token_counter: str | None = None,
        options: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        channel_exists: bool = False,
    ) -> Message:
        """Insert one message (and its channel if new); ``created_at`` defaults to now.
        ``channel_exists``: the channel is known to exist (a reply's): not checked."""
        if not channel_exists:
            self.ensure_channel(conn, channel)
        values = {
            "channel": channel,
            "persona": persona,
            "role": role,
            "author": author,
            "content": content,
            "source": source,
            "status": status,
            "reply_to": reply_to,
            "request_id": request_id,
            "token_count": token_count,
            "token_counter": token_counter,
            "options": dict(options) if options else None,
            "created_at": created_at or utcnow(),
        }
        if conn.dialect.name == "postgresql" and role == "assistant" and status == "complete" and reply_to:
            # Several daemons: at most one complete reply per message (migration 0006's index).
            found = conn.execute(
                insert_for(conn)(_M)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["reply_to"], index_where=_ONE_REPLY)
                .returning(_M.c.id)
            ).scalar_one_or_none()
            if found is None:
                raise AlreadyAnswered(reply_to)
            mid = int(found)
        else:
            mid = inserted_id(conn.execute(_INSERT, values))
        if role in CONVERSATION_ROLES:
            conn.execute(_COUNT_ONE_MORE, {"channel": channel})
        return Message(id=mid, **{**values, "options": dict(options or {})})  # type: ignore[arg-type]

    def add_many(self, conn: sa.Connection, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Insert messages (each given as :meth:`add`'s keyword arguments) with a few statements
        whatever their number; ids are assigned in the order given."""
        if not messages:
            return []
        now = utcnow()
        rows = [
            {
                "channel": m["channel"],
                "persona": m.get("persona"),
                "role": m["role"],
                "author": m["author"],
                "content": m["content"],
                "source": m.get("source", "chat"),
                "status": m["status"],
                "reply_to": m.get("reply_to"),
                "request_id": m.get("request_id"),
                "token_count": m.get("token_count"),
                "token_counter": m.get("token_counter"),
                "options": dict(m["options"]) if m.get("options") else None,
                "created_at": m.get("created_at") or now,
            }
            for m in messages
        ]
        ensure = _ENSURE_MANY.get(conn.dialect.name)
        if ensure is None:
            ensure = _ENSURE_MANY[conn.dialect.name] = insert_for(conn)(_C).on_conflict_do_nothing()
        channels = sorted({r["channel"] for r in rows})
        conn.execute(ensure, [{"name": c, "created_at": now, "message_count": 0} for c in channels])
        ids = conn.execute(_INSERT_MANY, rows).scalars().all()
        counts: dict[str, int] = {}
        for r in rows:
            if r["role"] in CONVERSATION_ROLES:
                counts[r["channel"]] = counts.get(r["channel"], 0) + 1
        if counts:
            conn.execute(_COUNT_MORE, [{"c": c, "n": n} for c, n in counts.items()])
        return [
            Message(id=int(mid), **{**r, "options": dict(r["options"] or {})}) for mid, r in zip(ids, rows, strict=True)
        ]

    def get(self, conn: sa.Connection, message_id: int) -> Message | None:
        """One message by id."""
        row = conn.execute(sa.select(_M).where(_M.c.id == message_id)).first()
        return None if row is None else _message(row)

    def askers(self, conn: sa.Connection, message_ids: Sequence[int]) -> dict[int, str]:
        """Each of ``message_ids``'s :attr:`Message.asker` (missing ids are absent)."""
        found: dict[int, str] = {}
        for chunk in id_chunks(message_ids):
            found.update((int(r.id), asker(r.options, r.author)) for r in conn.execute(_ASKERS, {"ids": chunk}))
        return found

    def statuses(self, conn: sa.Connection, message_ids: Sequence[int]) -> dict[int, str]:
        """The status of each of ``message_ids`` (missing ids are absent)."""
        found: dict[int, str] = {}
        for chunk in id_chunks(message_ids):
            found.update((int(mid), str(status)) for mid, status in conn.execute(_STATUSES, {"ids": chunk}))
        return found

    def set_status(self, conn: sa.Connection, message_id: int, status: str, *, unless: str | None = None) -> None:
        """Change a message's status (``unless`` it is in that status now)."""
        params: dict[str, Any] = {"mid": message_id, "new_status": status}
        if unless is None:
            conn.execute(_SET_STATUS, params)
        else:
            conn.execute(_SET_STATUS_UNLESS, {**params, "unless": unless})

    def set_statuses(self, conn: sa.Connection, message_ids: Sequence[int], status: str) -> None:
        """Change several messages' status, in one statement."""
        if message_ids:
            conn.execute(_SET_STATUS, [{"mid": mid, "new_status": status} for mid in message_ids])

    def set_token_counts(self, conn: sa.Connection, counts: Mapping[int, int], counter: str) -> None:
        """Keep computed token counts so assembling never counts a stored message twice."""
        if counts:
            conn.execute(
                sa.update(_M)
                .where(_M.c.id == sa.bindparam("mid"))
                .values(token_count=sa.bindparam("n"), token_counter=counter),
                [{"mid": mid, "n": n} for mid, n in counts.items()],
            )

    def recent(
        self,
        conn: sa.Connection,
        channel: str,
        limit: int,
        before_id: int | None = None,
        roles: Sequence[str] = ("user", "assistant"),
    ) -> list[Message]:
        """Up to ``limit`` messages of ``channel`` older than ``before_id``, newest first."""
        if tuple(roles) == CONVERSATION_ROLES:
            if before_id is None:
                rows = conn.execute(_RECENT, {"channel": channel, "limit": limit})
            else:
                rows = conn.execute(_RECENT_BEFORE, {"channel": channel, "limit": limit, "before_id": before_id})
            return [_message(r) for r in rows]
        query = sa.select(_M).where(_M.c.channel == channel, _M.c.role.in_(list(roles)))
        if before_id is not None:
            query = query.where(_M.c.id < before_id)
        query = query.order_by(_M.c.id.desc()).limit(limit)
        return [_message(r) for r in conn.execute(query)]

    def count(self, conn: sa.Connection, channel: str, before_id: int | None = None) -> int:
        """How many user and assistant messages ``channel`` holds (older than ``before_id`` when given).

        O(1) from the channel's counter, minus the few messages at or after ``before_id``.
        """
        return self.tally(conn, channel, before_id)[0]

    def tally(self, conn: sa.Connection, channel: str, before_id: int | None = None) -> tuple[int, int]:
        """:meth:`count`, and how many times a person's data was erased from the channel (which
        invalidates what was read of it before: :mod:`agentd.prompt.history_cache`)."""
        row = conn.execute(_CHANNEL_COUNT, {"channel": channel}).first()
        total, erasures = (0, 0) if row is None else (int(row[0] or 0), int(row[1] or 0))
        if before_id is not None:
            total -= int(conn.execute(_NEWER, {"channel": channel, "before_id": before_id}).scalar_one())
        return total, erasures

    def history_page(self, conn: sa.Connection, channel: str, before_id: int | None, limit: int) -> list[HistoryRow]:
        """``(id, role, content, token_count, token_counter, author)`` of up to ``limit`` conversation
        messages before ``before_id``, newest first (the assembler's hot path: plain tuples)."""
        rows = conn.exec_driver_sql(
            driver_sql(
                conn,
                "SELECT id, role, content, token_count, token_counter, author FROM messages "
                "WHERE channel = ? AND role IN ('user', 'assistant') AND id < ? ORDER BY id DESC LIMIT ?",
            ),
            (channel, before_id if before_id is not None else 2**62, limit),
        ).fetchall()
        return _history_rows(rows)

    def history_between(
        self, conn: sa.Connection, channel: str, after_id: int, before_id: int, limit: int
    ) -> list[HistoryRow]:
        """:meth:`history_page`'s rows with ``after_id < id < before_id``, newest first, at most ``limit``."""
        rows = conn.exec_driver_sql(
            driver_sql(
                conn,
                "SELECT id, role, content, token_count, token_counter, author FROM messages "
                "WHERE channel = ? AND role IN ('user', 'assistant') AND id > ? AND id < ? ORDER BY id DESC LIMIT ?",
            ),
            (channel, after_id, before_id, limit),
        ).fetchall()
        return _history_rows(rows)

    def late_replies(
        self, conn: sa.Connection, channel: str, before_id: int, limit: int = LATE_REPLIES
    ) -> dict[int, list[HistoryRow]]:
        """The replies stored after message ``before_id`` to messages before it (an earlier message
        of a burst, answered once this one was already stored), as :meth:`history_page`'s rows
        by the message they answer, oldest first; at most ``limit`` rows."""
        rows = conn.exec_driver_sql(
            driver_sql(
                conn,
                "SELECT id, role, content, token_count, token_counter, author, reply_to FROM messages "
                "WHERE channel = ? AND id > ? AND role = 'assistant' AND reply_to < ? ORDER BY id LIMIT ?",
            ),
            (channel, before_id, before_id, limit),
        ).fetchall()
        found: dict[int, list[HistoryRow]] = {}
        for answered, row in zip((int(r[6]) for r in rows), _history_rows(rows), strict=True):
            found.setdefault(answered, []).append(row)
        return found

    def channels(self, conn: sa.Connection, limit: int = 1000) -> list[tuple[str, str | None, str | None, int]]:
        """``(name, visibility, owner, message count)`` of up to ``limit`` channels, by name."""
        query = sa.select(_C.c.name, _C.c.visibility, _C.c.owner, _C.c.message_count).order_by(_C.c.name).limit(limit)
        return [(str(r[0]), r[1], r[2], int(r[3] or 0)) for r in conn.execute(query)]

    def after(self, conn: sa.Connection, channel: str, after_id: int, limit: int = 100) -> list[Message]:
        """Messages of ``channel`` with id > ``after_id``, oldest first."""
        return [_message(r) for r in conn.execute(_AFTER, {"channel": channel, "after_id": after_id, "limit": limit})]

    def by_author(
        self, conn: sa.Connection, channel: str, author: str, before_id: int, limit: int
    ) -> list[tuple[int, str]]:
        """``(id, content)`` of up to ``limit`` of ``author``'s user messages in ``channel`` before
        ``before_id``, newest first (the earlier exchanges' hot path: plain tuples)."""
        rows = conn.exec_driver_sql(
            driver_sql(
                conn,
                "SELECT id, content FROM messages WHERE channel = ? AND author = ? AND id < ? AND role = 'user' "
                "ORDER BY id DESC LIMIT ?",
            ),
            (channel, author, before_id, limit),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def replies_to(
        self, conn: sa.Connection, message_ids: Sequence[int], status: str | None = None
    ) -> dict[int, Message]:
        """The first assistant reply to each of ``message_ids`` (in ``status``, if given)."""
        if not message_ids:
            return {}
        params = {"ids": list(message_ids), "status": status}
        found: dict[int, Message] = {}
        for row in conn.execute(_REPLIES if status is None else _REPLIES_IN, params):
            msg = _message(row)
            assert msg.reply_to is not None
            found.setdefault(msg.reply_to, msg)
        return found

    def pending(self, conn: sa.Connection, key: tuple[str, str] | None = None, limit: int = 1000) -> list[Message]:
        """User messages accepted and not yet answered (of one (persona, channel) when ``key`` is given),
        oldest first; delegated tasks (answered inline by their caller) are left out."""
        query = sa.select(_M).where(_M.c.status == "pending", _M.c.role.in_(ANSWERED_ROLES), _M.c.source != "delegate")
        if key is not None:
            query = query.where(_M.c.persona == key[0], _M.c.channel == key[1])
        return [_message(r) for r in conn.execute(query.order_by(_M.c.id).limit(limit))]

    def pending_keys(self, conn: sa.Connection, limit: int = 1000) -> list[tuple[str, str]]:
        """The (persona, channel) pairs with messages waiting for a reply (see :meth:`pending`)."""
        query = (
            sa.select(_M.c.persona, _M.c.channel)
            .where(
                _M.c.status == "pending",
                _M.c.role.in_(ANSWERED_ROLES),
                _M.c.source != "delegate",
                _M.c.persona.is_not(None),
            )
            .distinct()
            .limit(limit)
        )
        return [(str(r[0]), str(r[1])) for r in conn.execute(query)]

    def chain_length(self, conn: sa.Connection, channel: str) -> int:
        """Persona-to-persona calls stored in ``channel`` since its last person's message (what
        ``[channels.NAME] max_persona_turns`` bounds)."""
        last = conn.execute(_LAST_PERSON, {"channel": channel}).scalar_one_or_none()
        return int(conn.execute(_CHAIN, {"channel": channel, "after_id": last or 0}).scalar_one())

    def last_answerer(self, conn: sa.Connection, channel: str) -> str | None:
        """The persona that answered (first) the last person's message of ``channel`` that one answered."""
        return conn.execute(_LAST_ANSWERER, {"channel": channel}).scalar_one_or_none()

    def with_status(self, conn: sa.Connection, status: str, limit: int = 10_000) -> list[Message]:
        """Messages in ``status`` (e.g. accepted user messages still ``pending``), oldest first."""
        query = sa.select(_M).where(_M.c.status == status).order_by(_M.c.id).limit(limit)
        return [_message(r) for r in conn.execute(query)]
