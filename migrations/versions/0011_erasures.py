"""Erasures: ``channels.erasures`` counts the times a person's data was erased from a channel.

``agentd user forget`` deletes messages, which nothing did before: a daemon's kept
history of a channel (``agentd.prompt.history_cache``) assumed rows are only ever
added. Each erasure bumps the channel's counter, and a kept history read at
another count is read afresh, in every process.

Frozen history: the literal DDL of this revision for each dialect.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

UPGRADE = "ALTER TABLE channels ADD COLUMN erasures INTEGER NOT NULL DEFAULT 0"


def upgrade() -> None:
    op.get_bind().exec_driver_sql(UPGRADE)


def downgrade() -> None:
    op.get_bind().exec_driver_sql("ALTER TABLE channels DROP COLUMN erasures")
