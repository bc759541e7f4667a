"""``GET /metrics`` (Prometheus' text format) and the middleware that counts HTTP requests.

The series are defined and counted in :mod:`agentd.observe.metrics`; this module reads the
daemon's live state for the gauges when Prometheus scrapes, and times each request under its
matched route's template (``/v1/channels/{channel}/messages``, never the raw path).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from agentd._exceptions import NotFound
from agentd.api.roles import Policy, allow
from agentd.api.schemas import MAX_NAME
from agentd.api.state import Daemon, daemon
from agentd.observe import metrics
from agentd.schemas.responses import UsageResponse, error_responses
from agentd.spend.caps import SpendCaps
from agentd.spend.usage import usage_report

router = APIRouter()

#: The background jobs whose backlog is reported, and whether the config runs each.
_JOBS = ("episodes", "extract")


def live_state(d: Daemon) -> metrics.Live:
    """The gauges' values now (a store read for the backlog: called off the event loop)."""
    cfg = d.app.config
    pids = d.runtime.worker_pids
    embedder = d.app.embedder if cfg.embedding.provider != "none" else None
    running = {"episodes": cfg.episodes.enabled, "extract": cfg.memory.extract == "model"}
    store = d.app.store
    with store.read() as conn:
        backlog = {job: len(store.cursors.behind(conn, job)) for job in _JOBS if running[job]}
    return metrics.Live(
        pending=d.runtime.pending,
        workers_up=sum(1 for p in pids if p is not None),
        workers_down=sum(1 for p in pids if p is None),
        embedder=embedder is not None,
        embedder_waiting=embedder.waiting if embedder is not None else 0,
        backlog=backlog,
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus' text format (0.0.4)."}},
    **allow(Policy.METRICS),
)
async def prometheus_metrics(d: Annotated[Daemon, Depends(daemon)]) -> Response:
    """Every series in Prometheus' text format (docs/guides/metrics.md): turns, stage times, model
    tokens and cost, recall, HTTP requests, and the gauges (pending messages, workers, embedder,
    background backlog). 404 when ``[telemetry] metrics = false``."""
    if not d.app.config.telemetry.metrics:
        raise NotFound("route", "/metrics ([telemetry] metrics = false)")
    live = await d.probe(lambda: live_state(d))
    body = await d.probe(lambda: metrics.render(live))
    return Response(body, media_type=metrics.CONTENT_TYPE)


@router.get("/v1/usage", response_model=UsageResponse, responses=error_responses(422), **allow(Policy.METRICS))
async def usage(
    d: Annotated[Daemon, Depends(daemon)],
    persona: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME, description="Only this persona's.")] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            description="From this time on (ISO 8601, UTC unless it says; a date alone: from its start).",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    by: Annotated[
        Literal["persona-model", "day", "persona", "model"],
        Query(description="One row per persona and model (the default), day, persona or model."),
    ] = "persona-model",
) -> dict[str, Any]:
    """Tokens and cost per persona and model (or day), from the stored context records: replies,
    delegations' subagent replies and extraction calls (as ``agentd usage --json``)."""
    report = await d.probe(lambda: usage_report(d.app.store, persona=persona, since=since, by=by))
    caps = await d.probe(lambda: SpendCaps(d.app.config, d.app.store, d.app.personas).today(persona=persona))
    return {**report.as_json(), "caps": [c.as_json() for c in caps]}
