"""Spend caps: ``usage_days`` holds the tokens spent per UTC day, persona, user and model.

The caps (a persona's ``max_tokens_per_day`` and ``max_cost_usd_per_day``, ``[users]
max_tokens_per_day``) are checked before each model call against today's rows: a few
rows read by primary key, where summing the day's context records would read each
reply's JSON. Each reply's row is written in the transaction that stores the reply,
and each extraction call's in the transaction that notes it on the reply's record.
Usage stored before this revision is not counted toward today's caps.

Frozen history: the literal DDL of this revision for each dialect.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

SQLITE = [
    """CREATE TABLE usage_days (
	day VARCHAR(10) NOT NULL,
	persona VARCHAR(64) NOT NULL,
	user_id VARCHAR(128) NOT NULL,
	model VARCHAR(256) NOT NULL,
	calls INTEGER NOT NULL,
	prompt_tokens INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	PRIMARY KEY (day, persona, user_id, model)
)""",
    "CREATE INDEX ix_usage_days_user ON usage_days (day, user_id)",
]

POSTGRESQL = [
    """CREATE TABLE usage_days (
	day VARCHAR(10) NOT NULL,
	persona VARCHAR(64) NOT NULL,
	user_id VARCHAR(128) NOT NULL,
	model VARCHAR(256) NOT NULL,
	calls INTEGER NOT NULL,
	prompt_tokens BIGINT NOT NULL,
	completion_tokens BIGINT NOT NULL,
	PRIMARY KEY (day, persona, user_id, model)
)""",
    "CREATE INDEX ix_usage_days_user ON usage_days (day, user_id)",
]


def upgrade() -> None:
    conn = op.get_bind()
    for statement in POSTGRESQL if conn.dialect.name == "postgresql" else SQLITE:
        conn.exec_driver_sql(statement)


def downgrade() -> None:
    op.get_bind().exec_driver_sql("DROP TABLE usage_days")
