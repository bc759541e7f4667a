"""Who a call acts for when it does not say: one rule for every way in.

The CLI, the web page, the OpenAI endpoint (a request without ``user``), MCP (stdio, or
``/mcp`` without ``user``) all ask :func:`acting_user`. A caller that names a user acts as
that user. Otherwise, on a loopback daemon without keys (and for the local CLI), the caller is
the person at this machine: the default user, ``[user] name``, else the login name. With
keys, a caller that names no user acts as its key's user: the one user the key was made for
(``agentd keys create --users NAME``), else the key's name.
"""

from __future__ import annotations

from typing import Protocol

from agentd.config import Config

#: The name of the caller of a daemon that needs no key, and of the local CLI.
LOCAL = "local"
#: Characters that make a key's user a pattern (``irc:*``), not one user.
_GLOB = frozenset("*?[")


class KeyCaller(Protocol):
    """A caller as :func:`acting_user` needs it: the key's name (and the users it was made for, if any)."""

    @property
    def name(self) -> str:
        """The key's name (:data:`LOCAL` for the keyless local caller)."""
        ...


def acting_user(named: str | None, caller: KeyCaller | None, config: Config) -> str:
    """``named``; else the default user for the local caller (``None`` or named :data:`LOCAL`); else the
    key's user (see the module docstring)."""
    if named:
        return named
    if caller is None or caller.name == LOCAL:
        return config.default_user()
    users = tuple(getattr(caller, "users", ()) or ())
    if len(users) == 1 and not _GLOB & set(users[0]):
        return str(users[0])
    return caller.name
