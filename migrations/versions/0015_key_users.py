"""Key users: ``api_keys.users`` lists the users an adapter key may act for.

An adapter key posted as any user in its channels, so a key for ``irc-*`` could post
as ``alice`` in a channel it declared direct and have her private memories recalled.
Keys now name the users they act for (globs such as ``irc:*``); a key made before
this revision has NULL here, and the daemon derives its users from its channel globs.

Frozen history: the literal DDL of this revision for each dialect.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = "ALTER TABLE api_keys ADD COLUMN users JSON"


def upgrade() -> None:
    op.get_bind().exec_driver_sql(UPGRADE)


def downgrade() -> None:
    op.get_bind().exec_driver_sql("ALTER TABLE api_keys DROP COLUMN users")
