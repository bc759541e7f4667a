"""Every error the API answers is JSON: ``{"error": {"code", "field", "message"}}``.

agentd's exceptions map to a status once, here; request validation (FastAPI's
pydantic errors) names the field and the reason; nothing else leaks a traceback.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentd._exceptions import (
    AgentdError,
    ConfigError,
    ContextOverflow,
    EmbedderUnavailable,
    EmbeddingMismatch,
    InvalidInput,
    NotFound,
    StoreError,
)
from agentd.runtime import ShuttingDown

log = structlog.get_logger("agentd.api")

#: agentd's exceptions and their HTTP status, most specific first.
_STATUS: tuple[tuple[type[AgentdError], int], ...] = (
    (ShuttingDown, 503),
    (InvalidInput, 422),
    (NotFound, 404),
    (ContextOverflow, 422),
    (EmbedderUnavailable, 503),
    (EmbeddingMismatch, 409),
    (StoreError, 503),
    (ConfigError, 500),
    (AgentdError, 500),
)
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The one error shape."""
    return {"error": {"code": code, "field": field, "message": message}}


def error_response(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A JSON error response."""
    return JSONResponse(error_body(code, message, field), status_code=status, headers=headers)


def status_of(exc: AgentdError) -> int:
    """The HTTP status for one of agentd's exceptions."""
    return next(status for kind, status in _STATUS if isinstance(exc, kind))


def field_of(exc: AgentdError) -> str | None:
    """The request field an error is about, when it names one."""
    if isinstance(exc, InvalidInput):
        return exc.field
    if isinstance(exc, NotFound):
        return "id" if exc.kind == "memory" else exc.kind
    return None


def _validation_field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts[:1]
    return ".".join(parts)


def _validation_message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    msg = str(err.get("msg", "is invalid"))
    if "input" in err and kind not in ("json_invalid",):
        got = err["input"]
        msg += f" (got {type(got).__name__})" if not isinstance(got, str | int | float | bool) else ""
    return msg[0].lower() + msg[1:] if msg else msg


def install(api: FastAPI) -> None:
    """Register the handlers that turn every failure into the JSON error shape."""

    @api.exception_handler(AgentdError)
    async def _agentd(_request: Request, exc: AgentdError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, ShuttingDown | EmbedderUnavailable):
            log.error("request_failed", code=exc.code, error=exc.message)
        return error_response(status, exc.code, exc.message, field_of(exc))

    @api.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        first = errors[0] if errors else {"loc": ("body",), "msg": "is invalid", "type": ""}
        if first.get("type") == "json_invalid":
            ctx = first.get("ctx") or {}
            return error_response(
                400, "malformed_json", f"the body is not valid JSON: {ctx.get('error', 'parse error')}", "body"
            )
        loc = tuple(first.get("loc", ("body",)))
        if loc == ("body",) and first.get("type") == "missing":
            return error_response(422, "invalid_input", "a JSON object is required", "body")
        field = _validation_field(loc)
        return error_response(422, "invalid_input", f"{field}: {_validation_message(first)}", field)

    @api.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        field = getattr(exc, "field", None)
        return error_response(exc.status_code, code, str(exc.detail), field, headers=getattr(exc, "headers", None))

    @api.exception_handler(Exception)
    async def _bug(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("request_bug", error=repr(exc))
        return error_response(500, "internal_error", "agentd failed to handle this request; see the daemon's log")
