"""Never give a forgotten memory's id to a new one (SQLite).

SQLite's default rowid allocation hands out ``max(id) + 1``: forget the newest
memory and the next one added (a user's, or an episode the background indexer
writes) takes its id, so a client that forgets the same id twice deletes a
memory it never saw. ``AUTOINCREMENT`` makes SQLite remember the highest id
ever used (``sqlite_sequence``); adding it means rebuilding the table, keeping
every row and id (the vector and full-text indexes are keyed by that id).
PostgreSQL's identity columns never reuse a value: nothing to do there.

Frozen history: the DDL is written out here.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = "id, persona, scope, category, text, content_hash, metadata, created_at, source_message_id"

UPGRADE = [
    """CREATE TABLE memories_new (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	persona VARCHAR(64) NOT NULL,
	scope VARCHAR(160) NOT NULL,
	category VARCHAR(64) NOT NULL,
	text TEXT NOT NULL,
	content_hash VARCHAR(64) NOT NULL,
	metadata JSON,
	created_at DATETIME NOT NULL,
	source_message_id INTEGER,
	CONSTRAINT uq_memories_persona_scope_hash UNIQUE (persona, scope, content_hash),
	FOREIGN KEY(source_message_id) REFERENCES messages (id) ON DELETE SET NULL
)""",
    f"INSERT INTO memories_new ({COLUMNS}) SELECT {COLUMNS} FROM memories ORDER BY id",
    "DROP TABLE memories",
    "ALTER TABLE memories_new RENAME TO memories",
    "CREATE INDEX ix_memories_persona_scope_id ON memories (persona, scope, id)",
]

DOWNGRADE = [
    """CREATE TABLE memories_old (
	id INTEGER NOT NULL,
	persona VARCHAR(64) NOT NULL,
	scope VARCHAR(160) NOT NULL,
	category VARCHAR(64) NOT NULL,
	text TEXT NOT NULL,
	content_hash VARCHAR(64) NOT NULL,
	metadata JSON,
	created_at DATETIME NOT NULL,
	source_message_id INTEGER,
	PRIMARY KEY (id),
	CONSTRAINT uq_memories_persona_scope_hash UNIQUE (persona, scope, content_hash),
	FOREIGN KEY(source_message_id) REFERENCES messages (id) ON DELETE SET NULL
)""",
    f"INSERT INTO memories_old ({COLUMNS}) SELECT {COLUMNS} FROM memories ORDER BY id",
    "DROP TABLE memories",
    "ALTER TABLE memories_old RENAME TO memories",
    "CREATE INDEX ix_memories_persona_scope_id ON memories (persona, scope, id)",
]


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        for statement in UPGRADE:
            conn.exec_driver_sql(statement)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        for statement in DOWNGRADE:
            conn.exec_driver_sql(statement)
