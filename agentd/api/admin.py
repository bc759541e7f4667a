"""Personas, budgets and health."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, Query

from agentd import __version__
from agentd._exceptions import AgentdError
from agentd.api.state import Daemon, daemon
from agentd.context.user_history import HistoryRecall, UserHistory, seeded_query
from agentd.memory.search import MemoryHit
from agentd.scopes import Reach, check_identifier
from agentd.skills import build_registry

router = APIRouter(tags=["admin"])
log = structlog.get_logger("agentd.api")


@router.get("/healthz")
def healthz(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Liveness and the actors' state (never needs the API key)."""
    try:
        health = d.runtime.health(timeout=2.0)
    except Exception as exc:  # a stopping supervisor or a timeout: report, never fail the probe
        return {"status": "stopping", "version": __version__, "reason": repr(exc)}
    return {"status": "ok" if health.get("healthy", True) else "degraded", "version": __version__, **health}


@router.get("/v1/personas")
def personas(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Every persona with its model, context window and channels."""
    rows = []
    for p in d.app.personas.values():
        window = d.app.windows.window_for(p.model, p.context_window)
        rows.append({
            "name": p.name, "model": p.model, "description": p.description, "context_window": window.tokens,
            "window_source": window.source, "output_reserve": p.max_tokens, "channels": list(p.channels),
            "skills": list(p.skills),
        })
    bindings = {name: list(c.personas) for name, c in d.app.config.channels.items() if c.personas}
    return {"personas": rows, "channel_bindings": bindings}


@router.get("/v1/budget")
def budget(
    d: Annotated[Daemon, Depends(daemon)],
    persona: Annotated[str, Query()],
    channel: Annotated[str, Query()],
    user: Annotated[str | None, Query(description="Whose user memories and past exchanges count.")] = None,
    message: Annotated[str | None, Query(description="The next message (default: none).")] = None,
) -> dict[str, Any]:
    """Where the tokens of the persona's next prompt in the channel would go (as ``agentd budget``)."""
    app = d.app
    check_identifier("channel", channel)
    if user is not None:
        check_identifier("user", user)
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
    hits: list[MemoryHit] = []
    if query and app.config.memory.auto_retrieve and app.embedder is not None:
        try:
            hits = app.memory.search(query, Reach(p.name, channel, user), limit=app.config.memory.top_k)
        except AgentdError as exc:
            log.warning("budget_retrieval_skipped", error=str(exc))
    tools = build_registry(p, app.memory if app.embedder is not None else None, app.personas).tool_definitions()
    ctx = app.builder.build(p, channel, message, memories=hits, user_history=recalled.snippets(), tools=tools)
    return {
        "persona": p.name,
        "channel": channel,
        "budget": ctx.budget.as_json(),
        "memories": [{**h.as_result(), "persona": h.memory.persona} for h in ctx.memories],
        "user_history": [s.text for s in ctx.user_history],
    }
