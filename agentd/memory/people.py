"""A person's data: export it, or erase it (``agentd user export|forget``, ``/v1/users/{user}``).

What is kept about a user and how it is erased is the store's business
(:mod:`agentd.store.people`); here the user id is checked and the erasure is
logged, without the data: the log line names the user by a digest
(:func:`user_digest`), so an operator can show that a given person's request
was carried out without the log itself keeping who they were or anything they said.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentd._exceptions import InvalidInput
from agentd.access.scopes import check_identifier, unseen_character
from agentd.observe.log import get_logger
from agentd.store import Store
from agentd.store.people import Erased

log = get_logger("agentd.people")


def user_digest(user: str) -> str:
    """How the log names a user whose data was erased: ``sha256:`` and 16 hex digits of the id."""
    return "sha256:" + hashlib.sha256(user.encode()).hexdigest()[:16]


def export_user(store: Store, user: str, persona: str | None = None) -> dict[str, Any]:
    """Everything kept about ``user`` (of ``persona`` only, when given), as one JSON document."""
    _stored_user(user)
    return store.export_user(user, persona)


def _stored_user(user: str) -> None:
    """A user id as one may have been stored: the identifier rules, except that a control,
    invisible or bidirectional character (refused now, accepted by earlier versions) is allowed,
    so a person stored under such an id can still be exported and erased."""
    if not isinstance(user, str) or "\x00" in user or unseen_character(user) is None:
        check_identifier("user", user)
    elif not 0 < len(user) <= 128:
        raise InvalidInput("user", "must be 1-128 characters")


def forget_user(store: Store, user: str, persona: str | None = None) -> Erased:
    """Erase everything kept about ``user`` (of ``persona`` only, when given), in one transaction."""
    _stored_user(user)
    erased = store.forget_user(user, persona)
    log.info(
        "user_forgotten",
        user=user_digest(user),
        persona=persona,
        messages=erased.messages,
        memories=erased.memories,
        episodes=erased.episodes,
        context_records=erased.context_records,
        memory_history=erased.memory_history,
        tool_calls=erased.tool_calls,
        redacted=sum(erased.redacted.values()),
        wal_kept=erased.wal_kept,
        remaining=sum(erased.remaining.values()),
        vacuumed=erased.vacuumed,
    )
    return erased
