"""Words: memory_fts gains a ``context`` column (indexed, never shown), rebuilt from memories.

SQLite only (PostgreSQL's schema starts at 0003's, in 0001). The FTS5 table is
contentless, so it cannot be altered in place: it is dropped, created with the
new column and every memory is indexed again, its ``metadata["context"]`` (if
a string) in the new column. Frozen history: the DDL, and the scope tokens of
column ``skey`` (sha1 of persona and scope) are written out here, not taken
from application code.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import hashlib
import json

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NEW_SQL = (
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, context, skey, content='', contentless_delete=1, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)
OLD_SQL = (
    "CREATE VIRTUAL TABLE memory_fts USING fts5(body, skey, content='', contentless_delete=1, "
    "tokenize='porter unicode61 remove_diacritics 2')"
)


def _skey(persona: str, scope: str) -> str:
    # One opaque token per persona and one per (persona, scope).
    persona_token = "p" + hashlib.sha1(persona.encode()).hexdigest()[:20]
    scope_token = "k" + hashlib.sha1(f"{persona}\x1f{scope}".encode()).hexdigest()[:20]
    return f"{persona_token} {scope_token}"


def _context(metadata: str | None) -> str:
    # A memory without metadata holds SQL NULL or the JSON text 'null'.
    parsed = json.loads(metadata) if isinstance(metadata, str) else None
    value = parsed.get("context") if isinstance(parsed, dict) else None
    return value.strip() if isinstance(value, str) else ""


def _batches():  # type: ignore[no-untyped-def]
    conn = op.get_bind()
    last = 0
    while True:
        batch = conn.exec_driver_sql(
            "SELECT id, persona, scope, text, metadata FROM memories WHERE id > ? ORDER BY id LIMIT 1000", (last,)
        ).fetchall()
        if not batch:
            return
        yield batch
        last = batch[-1][0]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    conn = op.get_bind()
    conn.exec_driver_sql("DROP TABLE IF EXISTS memory_fts")
    conn.exec_driver_sql(NEW_SQL)
    for batch in _batches():
        conn.exec_driver_sql(
            "INSERT INTO memory_fts(rowid, body, context, skey) VALUES (?, ?, ?, ?)",
            [(mid, text, _context(meta), _skey(persona, scope)) for mid, persona, scope, text, meta in batch],
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    conn = op.get_bind()
    conn.exec_driver_sql("DROP TABLE IF EXISTS memory_fts")
    conn.exec_driver_sql(OLD_SQL)
    for batch in _batches():
        conn.exec_driver_sql(
            "INSERT INTO memory_fts(rowid, body, skey) VALUES (?, ?, ?)",
            [(mid, text, _skey(persona, scope)) for mid, persona, scope, text, _meta in batch],
        )
