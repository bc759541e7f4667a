"""What a persona's next prompt in a channel would be made of, without calling a model.

``agentd budget`` and ``GET /v1/budget`` both show this, so both go through
:func:`preview`: the same history recall, seeded memory query, automatic
retrieval and tool definitions that a real turn would use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agentd._exceptions import AgentdError
from agentd.memory.ranking import MemoryHit
from agentd.prompt.assembler import AssembledContext
from agentd.prompt.user_history import HistoryRecall, UserHistory, seeded_query
from agentd.scopes import Reach, check_identifier

if TYPE_CHECKING:
    from agentd.app import App

log = structlog.get_logger("agentd.preview")


@dataclass(frozen=True)
class Preview:
    """The assembled context of the next turn and the past exchanges recalled for it."""

    context: AssembledContext
    recalled: HistoryRecall


def recall_for(app: App, persona: str, channel: str, user: str | None, query: str | None) -> list[MemoryHit]:
    """The memories automatic retrieval would inject for ``query`` (none when it is off or fails)."""
    if not query or not app.config.memory.auto_retrieve or app.embedder is None:
        return []
    try:
        return app.memory.search(query, Reach(persona, channel, user), limit=app.config.memory.top_k)
    except AgentdError as exc:
        log.warning("preview_retrieval_skipped", error=str(exc))
        return []


def preview(
    app: App,
    persona: str,
    channel: str,
    user: str | None = None,
    message: str | None = None,
    *,
    channel_field: str = "channel",
    user_field: str = "user",
) -> Preview:
    """Assemble ``persona``'s next prompt in ``channel`` as a turn would.

    Without ``message``, memories are recalled for the channel's last user
    message and no current message is counted. ``*_field`` name the inputs in
    errors (``--channel`` on the command line).
    """
    check_identifier(channel_field, channel)
    if user is not None:
        check_identifier(user_field, user)
    p = app.personas[persona]
    query = message
    if query is None:
        with app.store.read() as conn:
            last = app.store.messages.recent(conn, channel, 1, roles=("user",))
        query = last[0].content if last else None
    recalled = HistoryRecall()
    if user is not None and query:
        recalled = UserHistory(app.store, app.config.history).recall(channel, user, query, None)
        query = seeded_query(query, recalled, app.config.history.seed_sparse_below)
    hits = recall_for(app, p.name, channel, user, query)
    from agentd.skills import build_registry  # skills import the memory service; keep start-up light

    tools = build_registry(p, app.memory if app.embedder is not None else None, app.personas).tool_definitions()
    ctx = app.builder.build(p, channel, message, memories=hits, user_history=recalled.snippets(), tools=tools)
    return Preview(ctx, recalled)
