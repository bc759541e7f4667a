"""Initial schema: channels, messages, memories, vectors (sqlite-vec), words (FTS5), context records.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import context, op

from agentd.store import lexical, vectors
from agentd.store.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("message_count", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("channel", sa.String(128), sa.ForeignKey("channels.name"), nullable=False),
        sa.Column("persona", sa.String(64)),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reply_to", sa.Integer, sa.ForeignKey("messages.id")),
        sa.Column("request_id", sa.String(64)),
        sa.Column("token_count", sa.Integer),
        sa.Column("token_counter", sa.String(64)),
        sa.Column("options", sa.JSON),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_messages_channel_id", "messages", ["channel", "id"])
    op.create_index("ix_messages_channel_author_id", "messages", ["channel", "author", "id"])
    op.create_index("ix_messages_status", "messages", ["status"])
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("persona", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(160), nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("metadata", sa.JSON),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("source_message_id", sa.Integer, sa.ForeignKey("messages.id", ondelete="SET NULL")),
        sa.UniqueConstraint("persona", "scope", "content_hash", name="uq_memories_persona_scope_hash"),
    )
    op.create_index("ix_memories_persona_scope_id", "memories", ["persona", "scope", "id"])
    op.create_table(
        "embedding_space",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("model_id", sa.String(256), nullable=False),
        sa.Column("dimension", sa.Integer, nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "context_records",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("reply_id", sa.Integer, sa.ForeignKey("messages.id"), nullable=False, unique=True),
        sa.Column("user_message_id", sa.Integer, sa.ForeignKey("messages.id")),
        sa.Column("persona", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    dimension = int(context.config.attributes.get("embedding_dimension", 384))
    op.execute(vectors.create_sql(dimension))
    op.execute(lexical.CREATE_SQL)


def downgrade() -> None:
    op.execute(f"DROP TABLE IF EXISTS {lexical.TABLE}")
    op.execute(f"DROP TABLE IF EXISTS {vectors.TABLE}")
    for table in ("context_records", "embedding_space", "memories", "messages", "channels"):
        op.drop_table(table)
