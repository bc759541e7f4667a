"""OpenAI's error shape on the OpenAI-compatible routes.

Every other route answers ``{"error": {"code", "field", "message"}}``; on
:data:`PREFIXES` the same errors (from the API key check, the body limit, request
validation or agentd's exceptions) are rewritten, as plain ASGI middleware, to
``{"error": {"message", "type", "param", "code"}}``, and 422 becomes 400, as
OpenAI's clients expect.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Paths answered in OpenAI's error shape.
PREFIXES = ("/v1/chat/completions", "/v1/models")

_CODES = {"unauthorized": "invalid_api_key"}


def openai_error(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` for an agentd error code and HTTP status."""
    if status >= 500:
        kind = "server_error"
    elif status == 429:
        kind = "rate_limit_error"
    else:
        kind = "invalid_request_error"
    if code == "not_found" and param in ("model", "persona"):
        code, param = "model_not_found", "model"
    return {"error": {"message": message, "type": kind, "param": param, "code": _CODES.get(code, code)}}


def _rewrite(status: int, body: bytes) -> bytes:
    try:
        data = json.loads(body)
        error = data["error"]
        code, message, field = str(error["code"]), str(error["message"]), error.get("field")
    except (ValueError, KeyError, TypeError):
        return body
    return json.dumps(openai_error(status, code, message, field)).encode()


class OpenAIErrorShape:
    """Rewrites JSON error responses on :data:`PREFIXES` to OpenAI's shape."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIXES):
            await self._app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewriting(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] < 400:
                    await send(message)
                    return
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status = 400 if start["status"] == 422 else int(start["status"])
            body = _rewrite(status, b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self._app(scope, receive, rewriting)
