"""Binary-quantized vectors (sqlite-vec ``bit[]``) for large searches, derived from every stored vector.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op

from agentd.store import vectors

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Sized after the float table, and filled from it: a store upgraded with
    # memories in it searches persona-wide through the new table at once.
    vectors.rebuild_coarse(op.get_bind())


def downgrade() -> None:
    op.execute(f"DROP TABLE IF EXISTS {vectors.COARSE}")
