"""Personas, budgets and health."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from agentd import __version__
from agentd.api.state import Daemon, daemon
from agentd.prompt.preview import preview

router = APIRouter(tags=["admin"])


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
        rows.append(
            {
                "name": p.name,
                "model": p.model,
                "description": p.description,
                "context_window": window.tokens,
                "window_source": window.source,
                "output_reserve": p.max_tokens,
                "channels": list(p.channels),
                "skills": list(p.skills),
            }
        )
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
    ctx = preview(d.app, persona, channel, user, message).context
    return {
        "persona": persona,
        "channel": channel,
        "budget": ctx.budget.as_json(),
        "memories": [{**h.as_result(), "persona": h.memory.persona} for h in ctx.memories],
        "user_history": [s.text for s in ctx.user_history],
    }
