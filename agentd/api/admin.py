"""Personas, budgets and health."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from agentd import __version__
from agentd.access.scopes import IDENTIFIER_PATTERN, check_identifier
from agentd.api.roles import ADMITTED, ROLES_EXTENSION, Policy, allow, caller_of
from agentd.api.schemas import MAX_NAME, MAX_QUERY_MESSAGE
from agentd.api.state import Daemon, daemon
from agentd.schemas.responses import COMMON_ERRORS, BudgetResponse, Health, PersonaList, error_responses

router = APIRouter(tags=["admin"], responses=COMMON_ERRORS)


@router.get(
    "/healthz",
    response_model=Health,
    response_model_exclude_none=True,
    openapi_extra={"security": [], ROLES_EXTENSION: list(ADMITTED[Policy.OPEN])},
)
async def healthz(d: Annotated[Daemon, Depends(daemon)], request: Request) -> dict[str, Any]:
    """Liveness (never needs a key); with a valid key, also the actors' state and whether the store
    can be written.

    Without a key (on a daemon that needs one) the answer is only ``{"status": "ok"}``:
    the daemon is up. ``healthy`` is false (``status: degraded``) while an actor is
    marked unhealthy or the last write to the store failed (``store.error`` says why).
    Answered on the event loop with threads of its own: a hung model or embedder
    never delays it.
    """
    if caller_of(request) is None:
        return {"status": "ok"}
    try:
        health = await d.probe(lambda: d.runtime.health(timeout=2.0))
    except Exception as exc:  # a stopping supervisor or a timeout: report, never fail the probe
        return {"status": "stopping", "version": __version__, "reason": repr(exc)}
    # This process's last write, or a worker process's (it stores the replies it answers).
    worker_failure = health.pop("store_failure", None)
    failure = d.app.store.write_failure or worker_failure
    store = {"writable": failure is None, **({"error": failure} if failure else {})}
    healthy = bool(health.get("healthy", True)) and failure is None
    return {
        "status": "ok" if healthy else "degraded",
        "version": __version__,
        **health,
        "healthy": healthy,
        "store": store,
    }


@router.get("/v1/personas", response_model=PersonaList, **allow(Policy.ANY))
def personas(d: Annotated[Daemon, Depends(daemon)]) -> dict[str, Any]:
    """Every persona with its model, context window and channels."""
    bindings = {name: list(c.personas) for name, c in d.app.config.channels.items() if c.personas}
    return {
        "personas": [asdict(p) for p in d.app.describe_personas()],
        "channel_bindings": bindings,
        "default_user": d.app.config.default_user(),
    }


@router.get("/v1/budget", response_model=BudgetResponse, responses=error_responses(404, 422), **allow(Policy.ADMIN))
async def budget(
    d: Annotated[Daemon, Depends(daemon)],
    persona: Annotated[str, Query(min_length=1, max_length=MAX_NAME)],
    channel: Annotated[str, Query(pattern=IDENTIFIER_PATTERN)],
    user: Annotated[
        str | None, Query(pattern=IDENTIFIER_PATTERN, description="Whose user memories and past exchanges count.")
    ] = None,
    message: Annotated[
        str | None, Query(max_length=MAX_QUERY_MESSAGE, description="The next message (default: none).")
    ] = None,
) -> dict[str, Any]:
    """Where the tokens of the persona's next prompt in the channel would go (as ``agentd budget``)."""
    check_identifier("channel", channel)
    if user is not None:
        check_identifier("user", user)
    ctx = (await d.embedding_work(lambda: d.runtime.preview(persona, channel, user, message))).context
    return {
        "persona": persona,
        "channel": channel,
        "budget": ctx.budget.as_json(),
        "memories": [{**h.as_result(), "persona": h.memory.persona} for h in ctx.memories],
        "profile": [m.as_json() for m in ctx.profile],
        "user_history": [s.text for s in ctx.user_history],
        "episodes": [{**h.as_result(), "persona": h.memory.persona} for h in ctx.episodes],
    }
