"""The relational schema, as SQLAlchemy Core tables.

These declarations mirror ``migrations/versions``; the migrations are the source
of truth for the database, these are how Python code addresses it. They are Core
tables, not ORM classes: the repositories write SQL expressions and read rows, and
mapping classes would cost every command a fifth of a second at import
(docs/notes/startup.md). The two
virtual tables (``memory_vectors``: sqlite-vec, ``memory_fts``: FTS5) are not
declared here; :mod:`agentd.store.vectors` and :mod:`agentd.store.lexical` own them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes, stored as naive UTC text."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: agentd stores UTC-aware datetimes only")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def inserted_id(result: sa.CursorResult[Any]) -> int:
    """The primary key an INSERT of one row assigned."""
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def utcnow() -> datetime:
    """The current time, UTC-aware."""
    return datetime.now(UTC)


#: Ids per ``IN (...)`` list: well under SQLite's and PostgreSQL's bound parameter limits.
ID_CHUNK = 500


def id_chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    """``ids`` as lists of at most :data:`ID_CHUNK` ints, in order (one ``IN`` query each)."""
    for start in range(0, len(ids), ID_CHUNK):
        yield [int(i) for i in ids[start : start + ID_CHUNK]]


#: Every table agentd declares.
metadata = sa.MetaData()

#: Ids on PostgreSQL are 64-bit; SQLite's INTEGER already is.
_BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")

#: A chat channel, created on its first message.
channels = sa.Table(
    "channels",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    # User and assistant messages in the channel, kept by MessageRepo.add (O(1) counts).
    sa.Column("message_count", sa.Integer, nullable=False, default=0),
    # ``direct`` | ``shared`` as the first post that said so declared it (NULL: never declared).
    sa.Column("visibility", sa.String(16)),
    # The user of a direct channel.
    sa.Column("owner", sa.String(128)),
    # How many times a person's data was erased from it (``agentd user forget``; migration 0011).
    sa.Column("erasures", sa.Integer, nullable=False, default=0),
)

#: One message of a channel: a user's, a persona's reply, or a tool/system note.
messages = sa.Table(
    "messages",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("channel", sa.String(128), sa.ForeignKey("channels.name"), nullable=False),
    # The persona addressed (user messages) or speaking (replies).
    sa.Column("persona", sa.String(64)),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("author", sa.String(128), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    # Where it came from: chat, adapter, delegate, user_history, ...
    sa.Column("source", sa.String(32), nullable=False, default="chat"),
    # pending | answered | failed | awaiting_approval | held (user messages); complete | interrupted |
    # error (replies). 32 characters since migration 0012.
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("reply_to", sa.Integer, sa.ForeignKey("messages.id")),
    sa.Column("request_id", sa.String(64)),
    # Token count, computed once by the named counter and kept.
    sa.Column("token_count", sa.Integer),
    sa.Column("token_counter", sa.String(64)),
    sa.Column("options", sa.JSON),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Index("ix_messages_channel_id", "channel", "id"),
    sa.Index("ix_messages_channel_author_id", "channel", "author", "id"),
    sa.Index("ix_messages_status", "status"),
    sa.Index("ix_messages_reply_to", "reply_to"),
)

#: One long-term memory of a persona, in one scope.
memories = sa.Table(
    "memories",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("persona", sa.String(64), nullable=False),
    # ``global``, ``channel:NAME`` or ``user:ID``.
    sa.Column("scope", sa.String(160), nullable=False),
    sa.Column("category", sa.String(64), nullable=False, default="fact"),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("metadata", sa.JSON),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Column("source_message_id", sa.Integer, sa.ForeignKey("messages.id", ondelete="SET NULL")),
    sa.UniqueConstraint("persona", "scope", "content_hash", name="uq_memories_persona_scope_hash"),
    sa.Index("ix_memories_persona_scope_id", "persona", "scope", "id"),
    # A forgotten memory's id is never given to a new one (migration 0010).
    sqlite_autoincrement=True,
)

#: The embedding model whose vectors fill ``memory_vectors`` (one row).
embedding_space = sa.Table(
    "embedding_space",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("model_id", sa.String(256), nullable=False),
    sa.Column("dimension", sa.Integer, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False, default=utcnow),
)

#: What one reply was given: memories with scores, the budget, the model, usage.
context_records = sa.Table(
    "context_records",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("reply_id", sa.Integer, sa.ForeignKey("messages.id"), nullable=False, unique=True),
    sa.Column("user_message_id", sa.Integer, sa.ForeignKey("messages.id")),
    sa.Column("persona", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(128), nullable=False),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
)

#: How far one background job (``episodes``, ``extract``) has got in one channel.
job_cursors = sa.Table(
    "job_cursors",
    metadata,
    sa.Column("job", sa.String(32), primary_key=True),
    sa.Column("channel", sa.String(128), primary_key=True),
    # The last user message the job has finished with (its exchange done, or passed over).
    sa.Column("last_message_id", _BIGINT, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False, default=utcnow),
)

#: One change to a memory decided by extraction: ADD, UPDATE, DELETE or NONE, and why.
memory_history = sa.Table(
    "memory_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # Not a foreign key: the history of a deleted memory is kept.
    sa.Column("memory_id", _BIGINT, nullable=False),
    sa.Column("persona", sa.String(64), nullable=False),
    sa.Column("scope", sa.String(160), nullable=False),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("old_text", sa.Text),
    sa.Column("new_text", sa.Text),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("source_message_id", _BIGINT),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Index("ix_memory_history_memory_id", "memory_id", "id"),
)

#: An API key made with ``agentd keys create``: its role, its channels and the sha256 of its token.
api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(128), nullable=False),
    # ``admin`` | ``adapter`` | ``service``.
    sa.Column("role", sa.String(16), nullable=False),
    # Channel globs an adapter key may use (a JSON list; empty for other roles).
    sa.Column("channels", sa.JSON, nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Column("revoked_at", UTCDateTime),
    # User globs an adapter key may act for (a JSON list); NULL for keys made before migration 0015.
    sa.Column("users", sa.JSON),
)

#: A call to a tool with ``approval = "required"``, paused until an owner decides (migration 0012).
approvals = sa.Table(
    "approvals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("persona", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(128), nullable=False),
    # The user message whose turn is paused (not a foreign key: erasure deletes both).
    sa.Column("message_id", _BIGINT, nullable=False),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("call_id", sa.String(128), nullable=False),
    # The call's arguments, as the model sent them (JSON text).
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("asked_by", sa.String(128), nullable=False),
    # pending | approved | denied | expired
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("decided_by", sa.String(128)),
    sa.Column("reason", sa.Text),
    # JSON: the conversation so far and the rest of the round (agentd.runtime.pipeline.approval).
    sa.Column("resume", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Column("expires_at", UTCDateTime, nullable=False),
    sa.Column("decided_at", UTCDateTime),
    # When a daemon re-enqueued the decided turn; when the resumed turn used the decision.
    sa.Column("claimed_at", UTCDateTime),
    sa.Column("done_at", UTCDateTime),
    sa.Index("ix_approvals_state", "state"),
    sa.Index("ix_approvals_persona_channel", "persona", "channel", "message_id"),
)

#: One tool call a persona's model made: who triggered it, where, its arguments, the approval
#: decision and the outcome (the audit trail, ``agentd tools log``; migration 0012).
tool_calls = sa.Table(
    "tool_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("persona", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(128), nullable=False),
    sa.Column("message_id", _BIGINT),
    sa.Column("asked_by", sa.String(128)),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    # none | approved | denied | expired
    sa.Column("approval", sa.String(16), nullable=False),
    sa.Column("approval_id", _BIGINT),
    sa.Column("decided_by", sa.String(128)),
    # ok | error | denied
    sa.Column("outcome", sa.String(16), nullable=False),
    # The result or the error, cut short (RESULT_CHARS in agentd.store.tools).
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Index("ix_tool_calls_asked_by", "asked_by", "id"),
    sa.Index("ix_tool_calls_persona", "persona", "id"),
    sa.Index("ix_tool_calls_message_id", "message_id"),
)

#: Tokens spent per UTC day, persona, user and model: what the spend caps are checked against
#: (``agentd.spend.caps``), kept in the transaction that stores each reply and each extraction call.
usage_days = sa.Table(
    "usage_days",
    metadata,
    # ``YYYY-MM-DD``, UTC.
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("persona", sa.String(64), primary_key=True),
    # The user whose message the tokens answered ("": none, or erased).
    sa.Column("user_id", sa.String(128), primary_key=True),
    sa.Column("model", sa.String(256), primary_key=True),
    sa.Column("calls", sa.Integer, nullable=False, default=0),
    sa.Column("prompt_tokens", _BIGINT, nullable=False, default=0),
    sa.Column("completion_tokens", _BIGINT, nullable=False, default=0),
    sa.Index("ix_usage_days_user", "day", "user_id"),
)

#: A schedule: a persona's turn in a channel at a time (``at``) or at each occurrence of a
#: five-field ``cron`` in a ``timezone`` (migration 0013; :mod:`agentd.store.schedules`).
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("persona", sa.String(64), nullable=False),
    sa.Column("channel", sa.String(128), nullable=False),
    # The user it is for (its firing recalls their memories); NULL: nobody in particular.
    sa.Column("user_id", sa.String(128)),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("at", UTCDateTime),
    sa.Column("cron", sa.String(128)),
    sa.Column("timezone", sa.String(64)),
    # When it is next due (NULL once fired for good, missed or cancelled).
    sa.Column("next_at", UTCDateTime),
    # scheduled | fired | missed | cancelled
    sa.Column("state", sa.String(16), nullable=False),
    # Who made it: ``user:NAME``, ``key:NAME``, ``cli``, ``routine``.
    sa.Column("created_by", sa.String(160), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False, default=utcnow),
    sa.Column("last_fired_at", UTCDateTime),
    sa.Column("fired_count", sa.Integer, nullable=False, default=0),
    # The trigger message of its last firing.
    sa.Column("last_message_id", _BIGINT),
    # The name of the persona file's ``[[routines]]`` entry it mirrors (NULL: not a routine).
    sa.Column("routine", sa.String(64)),
    sa.Index("ix_schedules_due", "state", "next_at"),
    sa.Index("ix_schedules_user_state", "user_id", "state"),
    sa.UniqueConstraint("persona", "routine", name="uq_schedules_persona_routine"),
)
