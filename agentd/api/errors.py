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
    EmbedderNotConfigured,
    ErrorCode,
    InvalidInput,
    NotFound,
    ShuttingDown,
    http_status,
)

log = structlog.get_logger("agentd.api")

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
        if status >= 500 and not isinstance(exc, ShuttingDown | EmbedderNotConfigured):
            log.error("request_failed", code=exc.code, error=exc.message)
        return error_response(status, exc.code, exc.message, field_of(exc))

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
        field = _validation_field(loc)
        return error_response(422, ErrorCode.INVALID_INPUT, f"{field}: {_validation_message(first)}", field)

    @api.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(
            exc.status_code, ErrorCode.BAD_REQUEST if exc.status_code < 500 else ErrorCode.INTERNAL_ERROR
        )
        field = getattr(exc, "field", None)
        return error_response(exc.status_code, code, str(exc.detail), field, headers=getattr(exc, "headers", None))

    @api.exception_handler(Exception)
    async def _bug(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("request_bug", error=repr(exc))
        return error_response(
            500, ErrorCode.INTERNAL_ERROR, "agentd failed to handle this request; see the daemon's log"
        )
