"""The request span: each HTTP request is a span (``POST /v1/channels/{channel}/messages``), the
first of its trace, or a child of the caller's when it sent a W3C ``traceparent`` header.

Plain ASGI middleware, outermost, installed only when tracing is on
(:mod:`agentd.observe.tracing`). The span is current while the route runs, so the message a
route accepts carries it (``Turn.traceparent``) and its turn's spans join this trace, as
children of this span, even when they begin after the ``202`` ended it. The path's route
template names the span, never the path itself (which holds channel and user names).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.observe import tracing


class TraceRequests:
    """Opens the request's span, honouring the ``traceparent`` and ``tracestate`` headers."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method = str(scope["method"])
        headers = {
            key: value.decode("latin-1")
            for key, value in ((k.decode("latin-1").lower(), v) for k, v in scope.get("headers", ()))
            if key in ("traceparent", "tracestate")
        }
        attributes = {"http.request.method": method, "url.scheme": str(scope.get("scheme", "http"))}
        with tracing.span(method, attributes, parent=headers, kind="server") as span:

            async def send_and_note(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set("http.response.status_code", status)
                    if status >= 500:
                        span.fail(f"HTTP {status}")
                await send(message)

            try:
                await self._app(scope, receive, send_and_note)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.rename(f"{method} {route}")
                    span.set("http.route", route)
