"""The access log: one ``request`` event per HTTP request, with its status and duration.

Plain ASGI middleware, outermost, so it also logs what the key check and the body
limit refuse; a streamed reply is logged when its stream ends. The query string
is not logged (it may carry identifiers a log should not keep).
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.log import get_logger

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
            client = scope.get("client")
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round((time.perf_counter() - start) * 1000, 1),
                client=f"{client[0]}:{client[1]}" if client else None,
            )
