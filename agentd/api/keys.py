"""API keys with roles: made with ``agentd keys create``, stored hashed, checked in constant time.

A key is a random token (``agentd_`` + 43 URL-safe characters, 256 bits); the store
keeps only its sha256, so a copy of the database gives no key. Roles:

* ``admin``: everything (the config's ``[daemon] api_key`` is an admin key).
* ``adapter``: post to, read and follow the channels its globs match, and chat there
  only as the users it owns (:func:`owned_users`): the user globs given when it was
  made (``--users 'irc:*'``), else its network's users, named by its channel globs
  (``irc-*`` or ``dm-irc-*``: ``irc:*``). A key whose globs name no network and that
  was given no users acts for no one: it may read and follow, not post. No memory
  administration.
* ``service``: ``/v1/memory/search`` and ``/v1/memory/context`` for any user, read-only; and
  ``/v1/schedules`` for the one user each call names.
* ``metrics``: ``/metrics`` and ``/v1/usage``, read-only (for Prometheus and dashboards).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from agentd._exceptions import InvalidInput, NotFound
from agentd.access.scopes import check_identifier
from agentd.store import Store
from agentd.store.keys import StoredKey

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: What every token starts with (so a leaked one is recognisable in logs and scanners).
TOKEN_PREFIX = "agentd_"
#: The longest token worth hashing (anything longer is no key of ours).
MAX_TOKEN = 256


class Role(StrEnum):
    """What a key may do."""

    ADMIN = "admin"
    ADAPTER = "adapter"
    SERVICE = "service"
    METRICS = "metrics"


#: Characters that make a glob match more than one name.
_WILDCARDS = frozenset("*?[")


def owned_users(channels: Sequence[str]) -> tuple[str, ...]:
    """The users an adapter key owns when it was given none: ``NET:*`` for each network ``NET``
    its channel globs name (``irc-*`` and ``dm-irc-*`` name ``irc``; adapters map a network's
    rooms to ``NET-ROOM``, its direct messages to ``dm-NET-SENDER`` and its people to
    ``NET:SENDER``). Globs that name no network (``lobby``, ``dm-*``, ``*``) give none."""
    found: set[str] = set()
    for glob in channels:
        head, dash, _rest = glob.removeprefix("dm-").partition("-")
        if dash and head and not _WILDCARDS & set(head):
            found.add(f"{head}:*")
    return tuple(sorted(found))


@dataclass(frozen=True)
class Principal:
    """Who is calling: a key's role, name, channel globs and (an adapter's) user globs."""

    role: Role
    name: str
    channels: tuple[str, ...] = ()
    key_id: int | None = None
    users: tuple[str, ...] = ()

    def may_act_as(self, user: str) -> bool:
        """True when this caller may post or chat as ``user`` (and so have ``user``'s memories
        recalled): an admin as anyone, an adapter only as the users its globs match."""
        if self.role is Role.ADMIN:
            return True
        if self.role is Role.ADAPTER:
            return any(fnmatchcase(user, glob) for glob in self.users)
        return False

    def may_use_channel(self, channel: str) -> bool:
        """True when this caller may post to, read and follow ``channel``."""
        if self.role is Role.ADMIN:
            return True
        if self.role is Role.ADAPTER:
            return any(fnmatchcase(channel, glob) for glob in self.channels)
        return False


#: Who calls a daemon that needs no key (loopback, no key configured or created).
LOCAL_ADMIN = Principal(Role.ADMIN, "local")


def token_hash(token: str) -> str:
    """The sha256 (hex) of a token: what the store keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh, high-entropy token."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class CreatedKey:
    """A key just made: its token (shown once) and its stored row."""

    token: str
    key: StoredKey


class KeyBook:
    """The keys a daemon accepts: the config's admin key and the stored ones."""

    def __init__(self, store: Store, config_key: str = "") -> None:
        self._store = store
        self._config_key = config_key.encode()

    def create(
        self, role: str, name: str | None = None, channels: Sequence[str] = (), users: Sequence[str] = ()
    ) -> CreatedKey:
        """Make a key; only its hash is stored. ``users``: the user globs an adapter key acts for
        (default: its network's, :func:`owned_users`; one is needed)."""
        try:
            parsed = Role(role)
        except ValueError:
            raise InvalidInput("role", f"must be one of {', '.join(r.value for r in Role)}") from None
        globs = [c.strip() for c in channels if c.strip()]
        people = [u.strip() for u in users if u.strip()]
        if parsed is Role.ADAPTER and not globs:
            raise InvalidInput("channels", "an adapter key needs at least one channel glob (--channels 'irc-*')")
        if parsed is not Role.ADAPTER and (globs or people):
            raise InvalidInput("channels" if globs else "users", "only adapter keys are limited to channels and users")
        if parsed is Role.ADAPTER:
            people = people or list(owned_users(globs))
            if not people:
                raise InvalidInput(
                    "users",
                    f"the channel globs {', '.join(globs)} name no network whose users the key would act for: "
                    "give them (--users 'irc:*', or user ids)",
                )
            for glob in people:
                check_identifier("users", glob)
        token = new_token()
        label = name or f"{parsed.value}-{secrets.token_hex(3)}"
        if not 0 < len(label) <= 128:
            raise InvalidInput("name", "must be 1-128 characters")
        with self._store.write() as conn:
            key = self._store.keys.add(conn, label, parsed.value, globs, token_hash(token), people)
        return CreatedKey(token, key)

    def list(self) -> list[StoredKey]:
        """Every stored key, revoked ones included."""
        with self._store.read() as conn:
            return self._store.keys.all(conn)

    def revoke(self, ident: str) -> StoredKey:
        """Revoke the key with id or name ``ident`` (a name must name one key)."""
        with self._store.write() as conn:
            found = [k for k in self._store.keys.find(conn, ident) if k.revoked_at is None]
            if not found:
                raise NotFound("key", ident, "see agentd keys list")
            if len(found) > 1:
                raise InvalidInput("key", f"{len(found)} active keys are named {ident!r}: give the id")
            self._store.keys.revoke(conn, found[0].id)
        return found[0]

    def required(self) -> bool:
        """True when callers must send a key (one is configured or an active one is stored)."""
        if self._config_key:
            return True
        with self._store.read() as conn:
            return self._store.keys.active(conn) > 0

    def authenticate(self, token: str) -> Principal | None:
        """The caller a token identifies (``None``: no such key, or revoked). Blocking: one read."""
        if not token or len(token) > MAX_TOKEN:
            return None
        if self._config_key and hmac.compare_digest(token.encode(), self._config_key):
            return Principal(Role.ADMIN, "config")
        with self._store.read() as conn:
            return self._stored(conn, token)

    def caller(self, token: str | None) -> Principal | None:
        """Who a request comes from: :data:`LOCAL_ADMIN` when no key is :meth:`required`, else the
        caller ``token`` identifies (``None``: none sent, no such key, or revoked). One read at most."""
        if self._config_key:
            return None if token is None else self.authenticate(token)
        with self._store.read() as conn:
            if not self._store.keys.active(conn):
                return LOCAL_ADMIN
            return None if token is None or not token or len(token) > MAX_TOKEN else self._stored(conn, token)

    def _stored(self, conn: Connection, token: str) -> Principal | None:
        digest = token_hash(token)
        key = self._store.keys.by_hash(conn, digest)
        # Found by an index on the hash; compared once more in constant time.
        if key is None or key.revoked_at is not None or not hmac.compare_digest(key.token_hash, digest):
            return None
        users = key.users if key.users is not None else owned_users(key.channels)
        return Principal(Role(key.role), key.name, key.channels, key.id, users)
