"""Schema migrations (Alembic scripts in the repository's ``migrations/``).

Alembic is imported only when there is something to migrate: opening a store
that is already at the newest revision reads ``alembic_version`` with one query
and the scripts' revision ids with a regular expression (alembic itself takes
longer to import than the rest of a CLI command takes to run).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

import agentd
from agentd._exceptions import StoreError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

#: The advisory lock PostgreSQL migrations run under (any constant no other lock of agentd uses).
MIGRATION_LOCK = 0x6167656E7464  # "agentd"
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", re.M)


def migrations_dir() -> Path:
    """Inside a built wheel: ``agentd/_migrations``; in a checkout: ``<repo>/migrations``."""
    package = Path(agentd.__file__).parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise StoreError("the migration scripts are missing from this installation")


def _alembic_config(connection: sa.Connection | None, dimension: int) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["connection"] = connection
    cfg.attributes["embedding_dimension"] = dimension
    return cfg


def head_revision() -> str:
    """The newest revision the scripts define."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config(None, 0)).get_current_head()
    assert head is not None
    return head


def scripted_head() -> str | None:
    """The newest revision, read from the scripts' ``revision`` / ``down_revision`` lines
    without Alembic; ``None`` when that is not one unambiguous head (Alembic then decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (migrations_dir() / "versions").glob("*.py"):
        found = dict(_REVISION.findall(script.read_text(encoding="utf-8")))
        if "revision" not in found:
            return None
        revisions.add(found["revision"])
        if found.get("down_revision"):
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def known_revisions() -> set[str]:
    """Every revision the scripts define (read without Alembic): a database at another one was
    written by a newer release."""
    found: set[str] = set()
    for script in (migrations_dir() / "versions").glob("*.py"):
        revision = dict(_REVISION.findall(script.read_text(encoding="utf-8"))).get("revision")
        if revision:
            found.add(revision)
    return found


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise StoreError(f"the database has {len(rows)} schema heads ({', '.join(rows)}); expected one")
    return rows[0] if rows else None


def upgrade(engine: sa.Engine, dimension: int, target: str | None = None) -> tuple[str | None, str]:
    """Bring the database to ``target`` (default: the newest revision); return (before, after)."""
    before = current_revision(engine)
    if target is None and before is not None and before == scripted_head():
        return before, before
    target = target or head_revision()
    if before == target:
        return before, target
    from alembic import command

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Several daemons starting at once on one database: one migrates, the others wait
            # for it (the lock ends with this transaction) and then find nothing left to do.
            conn.execute(sa.text("SET LOCAL lock_timeout = '120s'"))
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        command.upgrade(_alembic_config(conn, dimension), target)
    return before, target
