"""Words: memory_fts gains a ``context`` column (indexed, never shown), rebuilt from memories.

The table is contentless, so it cannot be altered in place: it is dropped,
created with the current schema (:data:`agentd.store.lexical.CREATE_SQL`) and
every memory is indexed again, its ``metadata["context"]`` (if any) in the new
column. On a new database (0001 already created the current schema) this
rebuilds an empty table.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import json

from alembic import op

from agentd.store import lexical

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_OLD_SQL = (
    f"CREATE VIRTUAL TABLE {lexical.TABLE} USING fts5(body, skey, content='', contentless_delete=1, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)


def _rows(with_context: bool):  # type: ignore[no-untyped-def]
    conn = op.get_bind()
    last = 0
    while True:
        batch = conn.exec_driver_sql(
            "SELECT id, persona, scope, text, metadata FROM memories WHERE id > ? ORDER BY id LIMIT 1000", (last,)
        ).fetchall()
        if not batch:
            return
        for mid, persona, scope, text, metadata in batch:
            context = ""
            if with_context and isinstance(metadata, str):
                # A memory without metadata holds SQL NULL or the JSON text 'null'.
                parsed = json.loads(metadata)
                value = parsed.get("context") if isinstance(parsed, dict) else None
                context = value if isinstance(value, str) else ""
            yield (mid, persona, scope, text, context) if with_context else (mid, persona, scope, text)
        last = batch[-1][0]


def upgrade() -> None:
    op.execute(f"DROP TABLE IF EXISTS {lexical.TABLE}")
    op.execute(lexical.CREATE_SQL)
    lexical.insert(op.get_bind(), _rows(with_context=True))


def downgrade() -> None:
    op.execute(f"DROP TABLE IF EXISTS {lexical.TABLE}")
    op.execute(_OLD_SQL)
    op.get_bind().exec_driver_sql(
        f"INSERT INTO {lexical.TABLE}(rowid, body, skey) VALUES (?, ?, ?)",
        [(mid, text, f"{lexical.persona_token(p)} {lexical.scope_token(p, s)}") for mid, p, s, text in _rows(False)],
    )
