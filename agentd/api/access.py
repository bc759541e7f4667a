"""The access log and the HTTP metrics: one ``request`` event per HTTP request, with its status
and duration, and the same request counted and timed by its route's template
(``agentd_http_requests_total``, ``agentd_http_request_duration_seconds``) when metrics are on.

Plain ASGI middleware, outermost, so it also logs and counts what the key check and the body
limit refuse; a streamed reply is logged when its stream ends. The query string
is not logged (it may carry identifiers a log should not keep), and a metric's route label is
the template (``/v1/channels/{channel}/messages``), never the path.
"""

from __future__ import annotations

import time

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.observe import metrics
from agentd.observe.log import get_logger

log = get_logger("agentd.access")


class AccessLog:
    """Logs ``request`` (method, path, status, duration_ms, client) when a response ends."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # what the client gets if the application fails before answering

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, send_and_note)
        finally:
            elapsed = time.perf_counter() - start
            client = scope.get("client")
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round(elapsed * 1000, 1),
                client=f"{client[0]}:{client[1]}" if client else None,
            )
            if metrics.enabled():
                metrics.http_request(route_template(scope), scope["method"], status, elapsed)


def route_template(scope: Scope) -> str:
    """The template of the route that answered (FastAPI puts it in the scope), else the first that
    matches (a plain Starlette route such as ``/mcp``), else :data:`~agentd.observe.metrics.UNMATCHED_ROUTE`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", ()):
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return str(getattr(candidate, "path", metrics.UNMATCHED_ROUTE))
    return metrics.UNMATCHED_ROUTE
