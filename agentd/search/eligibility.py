"""Which memories a search may use where it is asked (:meth:`agentd.access.scopes.Reach.eligible`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.access.scopes import Reach
from agentd.search.request import Ineligible
from agentd.store import Store
from agentd.store.memories import Memory


def eligible_ids(
    store: Store, conn: Any, reach: Reach, memories: Sequence[Memory], excluded: list[Ineligible] | None
) -> set[int]:
    """The ids of ``memories`` that may be used in ``reach``; the others are appended to
    ``excluded`` (when given) with the reason. Outside a shared channel every one may."""
    if reach.shared_channel is None:
        return {m.id for m in memories}
    users = [m.id for m in memories if m.scope.kind == "user"]
    origins = store.memories.learned_in(conn, users) if users else {}
    allowed: set[int] = set()
    for m in memories:
        learned = origins.get(m.id)
        reason = reach.eligible(m.scope, learned)
        if reason is None:
            allowed.add(m.id)
        elif excluded is not None:
            excluded.append(Ineligible(m.id, str(m.scope), learned, reason))
    return allowed


def eligible(store: Store, reach: Reach, memories: Sequence[Memory]) -> list[Memory]:
    """The ``memories`` that may be used in ``reach``, in their order."""
    if reach.shared_channel is None:
        return list(memories)
    with store.read() as conn:
        allowed = eligible_ids(store, conn, reach, memories, None)
    return [m for m in memories if m.id in allowed]
