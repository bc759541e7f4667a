"""Index messages by ``reply_to`` on SQLite, as PostgreSQL's schema (0001) already does.

Every turn looks up the replies to the user's earlier messages it recalls
(``MessageRepo.replies_to``); without this index SQLite scans the whole
messages table for them. Frozen history: the DDL is written out here.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_messages_reply_to ON messages (reply_to)")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("DROP INDEX IF EXISTS ix_messages_reply_to")
