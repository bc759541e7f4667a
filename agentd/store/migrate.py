"""Schema migrations (Alembic scripts in the repository's ``migrations/``)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import agentd
from agentd._exceptions import StoreError


def migrations_dir() -> Path:
    """Inside a built wheel: ``agentd/_migrations``; in a checkout: ``<repo>/migrations``."""
    package = Path(agentd.__file__).parent
    for candidate in (package / "_migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise StoreError("the migration scripts are missing from this installation")


def _alembic_config(connection: sa.Connection | None, dimension: int) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["connection"] = connection
    cfg.attributes["embedding_dimension"] = dimension
    return cfg


def head_revision() -> str:
    """The newest revision the scripts define."""
    head = ScriptDirectory.from_config(_alembic_config(None, 0)).get_current_head()
    assert head is not None
    return head


def current_revision(engine: sa.Engine) -> str | None:
    """The revision the database is at (``None`` for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: sa.Engine, dimension: int, target: str | None = None) -> tuple[str | None, str]:
    """Bring the database to ``target`` (default: the newest revision); return (before, after)."""
    before = current_revision(engine)
    target = target or head_revision()
    if before == target:
        return before, target
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn, dimension), target)
    return before, target
