"""Personas, budgets and health."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from agentd import __version__
from agentd.api.responses import COMMON_ERRORS, BudgetResponse, Health, PersonaList, error_responses
from agentd.api.state import Daemon, daemon
from agentd.scopes import check_identifier

router = APIRouter(tags=["admin"], responses=COMMON_ERRORS)


@router.get("/healthz", response_model=Health, response_model_exclude_none=True)
def healthz(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Liveness and the actors' state (never needs the API key)."""
    try:
        health = d.runtime.health(timeout=2.0)
    except Exception as exc:  # a stopping supervisor or a timeout: report, never fail the probe
        return {"status": "stopping", "version": __version__, "reason": repr(exc)}
    return {"status": "ok" if health.get("healthy", True) else "degraded", "version": __version__, **health}


@router.get("/v1/personas", response_model=PersonaList)
def personas(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Every persona with its model, context window and channels."""
    bindings = {name: list(c.personas) for name, c in d.app.config.channels.items() if c.personas}
    return {"personas": [asdict(p) for p in d.app.describe_personas()], "channel_bindings": bindings}


@router.get("/v1/budget", response_model=BudgetResponse, responses=error_responses(404, 422))
def budget(
    d: Annotated[Daemon, Depends(daemon)],
    persona: Annotated[str, Query()],
    channel: Annotated[str, Query()],
    user: Annotated[str | None, Query(description="Whose user memories and past exchanges count.")] = None,
    message: Annotated[str | None, Query(description="The next message (default: none).")] = None,
) -> dict[str, Any]:
    """Where the tokens of the persona's next prompt in the channel would go (as ``agentd budget``)."""
    check_identifier("channel", channel)
    if user is not None:
        check_identifier("user", user)
    ctx = d.runtime.preview(persona, channel, user, message).context
    return {
        "persona": persona,
        "channel": channel,
        "budget": ctx.budget.as_json(),
        "memories": [{**h.as_result(), "persona": h.memory.persona} for h in ctx.memories],
        "profile": [m.as_json() for m in ctx.profile],
        "user_history": [s.text for s in ctx.user_history],
    }
