"""Binary-quantized vectors (sqlite-vec ``bit[]``) for large searches, derived from every stored vector.

SQLite only (PostgreSQL's schema starts at this revision's, in 0001). Sized
after the float table and filled from it, so a store upgraded with memories in
it searches persona-wide through the new table at once. Frozen history: the
DDL is written out here, not taken from application code.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import re

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    conn.exec_driver_sql("DROP TABLE IF EXISTS memory_vectors_bits")
    ddl = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'memory_vectors'").scalar()
    found = re.search(r"\bFLOAT\[(\d+)\]", ddl or "", re.IGNORECASE)
    if found is None:
        return
    conn.exec_driver_sql(
        "CREATE VIRTUAL TABLE memory_vectors_bits USING vec0(persona TEXT PARTITION KEY, scope TEXT PARTITION KEY, "
        f"embedding BIT[{int(found.group(1))}], chunk_size=256)"
    )
    conn.exec_driver_sql(
        "INSERT INTO memory_vectors_bits(rowid, persona, scope, embedding) "
        "SELECT rowid, persona, scope, vec_quantize_binary(embedding) FROM memory_vectors"
    )
    # vec0 finds a partition's chunks by scanning its chunk table; index the partition columns.
    for table in ("memory_vectors", "memory_vectors_bits"):
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {table}_chunks_partition ON {table}_chunks(partition00, partition01)"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS memory_vectors_bits")
