"""Client messages: how the earlier messages of an OpenAI-style request meet the channel's stored transcript.

OpenAI clients are stateless: every request carries the whole conversation. agentd
is not: the channel already holds it. The rule, applied before the last user
message is submitted:

1. Only ``user`` and ``assistant`` messages with text count (``system`` and
   ``developer`` messages are ignored: the persona's own system prompt rules;
   ``tool`` messages and tool-call-only turns are ignored too). Texts are
   compared with whitespace collapsed.
2. If the request's earlier messages end as the stored conversation ends (the
   newest of each are equal), nothing is added: the client resent what agentd
   has. Older messages in the request that agentd never saw are ignored.
3. Otherwise the longest run at the start of the request's earlier messages that
   equals the end of the stored conversation is skipped, and the rest (what the
   client shows and agentd does not have: a conversation begun elsewhere, or an
   edited one) is stored before the new message as history, ``source =
   "imported"``, so the prompt sees what the person sees. Imported messages are
   never answered themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentd.store import Store

#: Most earlier messages of one request that are compared (and imported).
MAX_EARLIER = 200


@dataclass(frozen=True)
class Earlier:
    """One earlier message of the request."""

    role: str
    text: str


def _norm(text: str) -> str:
    return " ".join(text.split())


def missing(earlier: Sequence[Earlier], stored: Sequence[Earlier]) -> list[Earlier]:
    """The request's earlier messages that must be stored (the rule above; ``stored`` oldest first)."""
    req = [(m.role, _norm(m.text)) for m in earlier[-MAX_EARLIER:]]
    have = [(m.role, _norm(m.text)) for m in stored]
    if not req:
        return []
    if have and req[-1] == have[-1]:
        return []
    for j in range(min(len(req), len(have)), 0, -1):
        if req[:j] == have[-j:]:
            return list(earlier[-MAX_EARLIER:][j:])
    return list(earlier[-MAX_EARLIER:])


def reconcile(store: Store, channel: str, user: str, persona: str, earlier: Sequence[Earlier]) -> int:
    """Store what ``earlier`` has and the channel lacks; return how many messages were stored."""
    if not earlier:
        return 0
    with store.read() as conn:
        newest_first = store.messages.recent(conn, channel, min(len(earlier), MAX_EARLIER))
    stored = [Earlier(m.role, m.content) for m in reversed(newest_first)]
    new = missing(earlier, stored)
    if not new:
        return 0
    with store.write() as conn:
        for m in new:
            store.messages.add(
                conn,
                channel=channel,
                role=m.role,
                author=user if m.role == "user" else persona,
                persona=persona,
                content=m.text,
                status="answered" if m.role == "user" else "complete",
                source="imported",
            )
    return len(new)
