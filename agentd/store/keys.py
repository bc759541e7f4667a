"""API keys: rows in ``api_keys``, found by the sha256 of their token (the token is never stored)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from agentd.store import schema
from agentd.store.schema import inserted_id, utcnow

_T = schema.api_keys
#: Built once: every authenticated request asks it.
_ACTIVE = sa.select(sa.func.count()).select_from(_T).where(_T.c.revoked_at.is_(None))


@dataclass(frozen=True)
class StoredKey:
    """One API key as stored: no token, only its hash."""

    id: int
    name: str
    role: str
    channels: tuple[str, ...]
    token_hash: str
    created_at: datetime
    revoked_at: datetime | None
    #: The users an adapter key may act for (globs: ``irc:*``, ``alice``); ``None``: made before
    #: keys named their users (the API derives them from the channel globs).
    users: tuple[str, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (without the hash)."""
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "channels": list(self.channels),
            "users": None if self.users is None else list(self.users),
            "created_at": self.created_at.isoformat().replace("+00:00", "Z"),
            "revoked_at": self.revoked_at.isoformat().replace("+00:00", "Z") if self.revoked_at else None,
        }


def _key(row: sa.Row[Any]) -> StoredKey:
    m = row._mapping
    return StoredKey(
        id=m["id"],
        name=m["name"],
        role=m["role"],
        channels=tuple(m["channels"] or ()),
        token_hash=m["token_hash"],
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
        users=None if m["users"] is None else tuple(m["users"]),
    )


class KeyRepo:
    """SQL for API keys."""

    def add(
        self,
        conn: sa.Connection,
        name: str,
        role: str,
        channels: Sequence[str],
        token_hash: str,
        users: Sequence[str] = (),
    ) -> StoredKey:
        """Insert a key (``users``: the users an adapter key may act for)."""
        now = utcnow()
        values = {
            "name": name,
            "role": role,
            "channels": list(channels),
            "users": list(users),
            "token_hash": token_hash,
            "created_at": now,
        }
        kid = inserted_id(conn.execute(sa.insert(_T).values(**values)))
        return StoredKey(kid, name, role, tuple(channels), token_hash, now, None, tuple(users))

    def by_hash(self, conn: sa.Connection, token_hash: str) -> StoredKey | None:
        """The key (revoked or not) whose token hashes to ``token_hash``."""
        row = conn.execute(sa.select(_T).where(_T.c.token_hash == token_hash)).first()
        return None if row is None else _key(row)

    def all(self, conn: sa.Connection, limit: int = 10_000) -> list[StoredKey]:
        """Every key, oldest first."""
        return [_key(r) for r in conn.execute(sa.select(_T).order_by(_T.c.id).limit(limit))]

    def active(self, conn: sa.Connection) -> int:
        """How many keys are not revoked."""
        return int(conn.execute(_ACTIVE).scalar_one())

    def find(self, conn: sa.Connection, ident: str) -> list[StoredKey]:
        """Keys with id ``ident`` (when numeric) or named ``ident``."""
        clause = _T.c.name == ident
        if ident.isdigit():
            clause = sa.or_(clause, _T.c.id == int(ident))
        return [_key(r) for r in conn.execute(sa.select(_T).where(clause).order_by(_T.c.id).limit(100))]

    def revoke(self, conn: sa.Connection, key_id: int) -> bool:
        """Mark a key revoked (False if it was already, or does not exist)."""
        done = conn.execute(
            sa.update(_T).where(_T.c.id == key_id, _T.c.revoked_at.is_(None)).values(revoked_at=utcnow())
        ).rowcount
        return bool(done)
