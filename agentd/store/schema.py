"""The relational schema, as SQLAlchemy 2.x tables.

These declarations mirror ``migrations/versions``; the migrations are the source
of truth for the database, these are how Python code addresses it. The two
virtual tables (``memory_vectors``: sqlite-vec, ``memory_fts``: FTS5) are not
declared here; :mod:`agentd.store.vectors` and :mod:`agentd.store.lexical` own them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


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


class Base(DeclarativeBase):
    """Declarative base of agentd's tables."""


def table(row: type[Base]) -> sa.Table:
    """The :class:`sqlalchemy.Table` behind a declared row class (typed for the repositories)."""
    found = row.__table__
    assert isinstance(found, sa.Table)
    return found


class ChannelRow(Base):
    """A chat channel, created on its first message."""

    __tablename__ = "channels"

    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: User and assistant messages in the channel, kept by MessageRepo.add (O(1) counts).
    message_count: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    #: ``direct`` | ``shared`` as the first post that said so declared it (NULL: never declared).
    visibility: Mapped[str | None] = mapped_column(sa.String(16))
    #: The user of a direct channel.
    owner: Mapped[str | None] = mapped_column(sa.String(128))


class MessageRow(Base):
    """One message of a channel: a user's, a persona's reply, or a tool/system note."""

    __tablename__ = "messages"
    __table_args__ = (
        sa.Index("ix_messages_channel_id", "channel", "id"),
        sa.Index("ix_messages_channel_author_id", "channel", "author", "id"),
        sa.Index("ix_messages_status", "status"),
        sa.Index("ix_messages_reply_to", "reply_to"),
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(sa.ForeignKey("channels.name"), nullable=False)
    #: The persona addressed (user messages) or speaking (replies).
    persona: Mapped[str | None] = mapped_column(sa.String(64))
    role: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    author: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    content: Mapped[str] = mapped_column(sa.Text, nullable=False)
    #: Where it came from: chat, adapter, delegate, user_history, ...
    source: Mapped[str] = mapped_column(sa.String(32), nullable=False, default="chat")
    #: pending | answered | failed (user messages); complete | interrupted | error (replies)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    reply_to: Mapped[int | None] = mapped_column(sa.ForeignKey("messages.id"))
    request_id: Mapped[str | None] = mapped_column(sa.String(64))
    #: Token count, computed once by the named counter and kept.
    token_count: Mapped[int | None] = mapped_column(sa.Integer)
    token_counter: Mapped[str | None] = mapped_column(sa.String(64))
    options: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class MemoryRow(Base):
    """One long-term memory of a persona, in one scope."""

    __tablename__ = "memories"
    __table_args__ = (
        sa.UniqueConstraint("persona", "scope", "content_hash", name="uq_memories_persona_scope_hash"),
        sa.Index("ix_memories_persona_scope_id", "persona", "scope", "id"),
        # A forgotten memory's id is never given to a new one (migration 0010).
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    persona: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    #: ``global``, ``channel:NAME`` or ``user:ID``.
    scope: Mapped[str] = mapped_column(sa.String(160), nullable=False)
    category: Mapped[str] = mapped_column(sa.String(64), nullable=False, default="fact")
    text: Mapped[str] = mapped_column(sa.Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", sa.JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    source_message_id: Mapped[int | None] = mapped_column(sa.ForeignKey("messages.id", ondelete="SET NULL"))


class EmbeddingSpaceRow(Base):
    """The embedding model whose vectors fill ``memory_vectors`` (one row)."""

    __tablename__ = "embedding_space"

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[str] = mapped_column(sa.String(256), nullable=False)
    dimension: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class ContextRecordRow(Base):
    """What one reply was given: memories with scores, the budget, the model, usage."""

    __tablename__ = "context_records"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    reply_id: Mapped[int] = mapped_column(sa.ForeignKey("messages.id"), nullable=False, unique=True)
    user_message_id: Mapped[int | None] = mapped_column(sa.ForeignKey("messages.id"))
    persona: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    channel: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    model: Mapped[str] = mapped_column(sa.String(256), nullable=False)
    data: Mapped[dict[str, Any]] = mapped_column(sa.JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class JobCursorRow(Base):
    """How far one background job (``episodes``, ``extract``) has got in one channel."""

    __tablename__ = "job_cursors"

    job: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    channel: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    #: The last user message the job has finished with (its exchange done, or passed over).
    last_message_id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class MemoryHistoryRow(Base):
    """One change to a memory decided by extraction: ADD, UPDATE, DELETE or NONE, and why."""

    __tablename__ = "memory_history"
    __table_args__ = (sa.Index("ix_memory_history_memory_id", "memory_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    #: Not a foreign key: the history of a deleted memory is kept.
    memory_id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"), nullable=False)
    persona: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    scope: Mapped[str] = mapped_column(sa.String(160), nullable=False)
    event: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    old_text: Mapped[str | None] = mapped_column(sa.Text)
    new_text: Mapped[str | None] = mapped_column(sa.Text)
    reason: Mapped[str] = mapped_column(sa.Text, nullable=False)
    source_message_id: Mapped[int | None] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class ApiKeyRow(Base):
    """An API key made with ``agentd keys create``: its role, its channels and the sha256 of its token."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    #: ``admin`` | ``adapter`` | ``service``.
    role: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    #: Channel globs an adapter key may use (a JSON list; empty for other roles).
    channels: Mapped[list[str]] = mapped_column(sa.JSON, nullable=False)
    token_hash: Mapped[str] = mapped_column(sa.String(64), nullable=False, unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
