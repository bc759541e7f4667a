"""Every error the API answers is JSON: ``{"error": {"code", "field", "message"}}``.

agentd's exceptions map to a status once, here; request validation (FastAPI's
pydantic errors) names the field and the reason; nothing else leaks a traceback
(:class:`CatchAll`), and no error closes the client's keep-alive connection.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd._exceptions import (
    AgentdError,
    BudgetExceeded,
    EmbedderNotConfigured,
    ErrorCode,
    InvalidInput,
    NotFound,
    Overloaded,
    ShuttingDown,
    http_status,
)
from agentd.observe.log import get_logger
from agentd.ops.base import describe, field_name

log = get_logger("agentd.api")

#: Starlette's own HTTP errors (routing, methods) and the code each is answered with.
_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.BODY_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The one error shape."""
    return {"error": {"code": code, "field": field, "message": message}}


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A JSON error response."""
    return JSONResponse(error_body(code, message, field), status_code=status, headers=headers)


def seconds_until(at: str) -> int:
    """Whole seconds from now until ``at`` (an ISO time), at least 1: a ``Retry-After`` value."""
    when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return max(1, math.ceil((when - datetime.now(UTC)).total_seconds()))


def retry_headers(exc: AgentdError) -> dict[str, str] | None:
    """``Retry-After`` for an error that says when to come back (admission control, a spend cap)."""
    if isinstance(exc, Overloaded):
        return {"Retry-After": str(exc.retry_after)}
    if isinstance(exc, BudgetExceeded):
        return {"Retry-After": str(seconds_until(exc.resets_at))}
    return None


def status_of(exc: AgentdError) -> int:
    """The HTTP status for one of agentd's exceptions (from the catalogue)."""
    return http_status(exc.code)


def field_of(exc: AgentdError) -> str | None:
    """The request field an error is about, when it names one."""
    if isinstance(exc, InvalidInput):
        return exc.field
    if isinstance(exc, NotFound):
        return "id" if exc.kind == "memory" else exc.kind
    return None


def install(api: FastAPI) -> None:
    """Register the handlers that turn every failure into the JSON error shape."""

    @api.exception_handler(AgentdError)
    async def _agentd(_request: Request, exc: AgentdError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, ShuttingDown | EmbedderNotConfigured):
            log.error("request_failed", code=exc.code, error=exc.message)
        return error_response(status, exc.code, exc.message, field_of(exc), retry_headers(exc))

    @api.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        first: dict[str, Any] = dict(errors[0]) if errors else {"loc": ("body",), "msg": "is invalid", "type": ""}
        if first.get("type") == "json_invalid":
            ctx: dict[str, Any] = first.get("ctx") or {}
            return error_response(
                400, ErrorCode.MALFORMED_JSON, f"the body is not valid JSON: {ctx.get('error', 'parse error')}", "body"
            )
        loc = tuple(first.get("loc", ("body",)))
        if loc == ("body",) and first.get("type") == "missing":
            return error_response(422, ErrorCode.INVALID_INPUT, "a JSON object is required", "body")
        field = field_name(loc)
        return error_response(422, ErrorCode.INVALID_INPUT, f"{field}: {describe(first)}", field)

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(
            exc.status_code, ErrorCode.BAD_REQUEST if exc.status_code < 500 else ErrorCode.INTERNAL_ERROR
        )
        field = getattr(exc, "field", None)
        headers = dict(getattr(exc, "headers", None) or {})
        message = str(exc.detail)
        if exc.status_code == 405:
            allowed = allowed_methods(request)
            headers["Allow"] = ", ".join(allowed)
            message = f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed)}"
        return error_response(exc.status_code, code, message, field, headers=headers or None)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (Starlette's own 405 names only the
    first route that matched the path)."""
    found: set[str] = set()

    def visit(routes: Iterable[Any]) -> None:
        for route in routes:
            inner = getattr(getattr(route, "original_router", None), "routes", None)
            if inner is not None:  # an included router: its own routes
                visit(inner)
                continue
            match, _child = route.matches(request.scope)
            if match is not Match.NONE:
                found.update(getattr(route, "methods", None) or ())

    visit(request.app.router.routes)
    return sorted(found)


class CatchAll:
    """Innermost middleware: a bug in a route becomes the JSON 500, and the connection stays usable.

    (Starlette's own last-resort handler answers, then raises the error again, and the
    server closes the keep-alive connection without saying so.) A bug after the
    response has started cannot be answered: the server closes that connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, receive, watch)
        except Exception as exc:
            log.exception("request_bug", path=scope.get("path"), error=repr(exc))
            if started:
                raise
            response = error_response(
                500, ErrorCode.INTERNAL_ERROR, "agentd failed to handle this request; see the daemon's log"
            )
            await response(scope, receive, send)
