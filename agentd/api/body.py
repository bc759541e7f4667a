"""The door for request bodies: JSON only, and nested at most :data:`MAX_JSON_DEPTH` levels.

Every route that takes a body takes JSON. A body sent as another media type
(``text/plain``, a form) is refused with 415 ``unsupported_media_type`` before
it is read. A JSON body is read whole (``daemon.max_body_bytes`` bounds it, see
:class:`agentd.api.guard.BodyLimit`) and its nesting is measured before any
parser sees it: deeper than :data:`MAX_JSON_DEPTH` is 422 ``invalid_input``.
Without the bound, a memory's metadata nested a few hundred levels deep was
stored, and then every list and search that met it failed to serialize it
(500) until it was deleted; thousands of levels exhaust the parser's recursion.

A request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
with 400 and its connection closed (:class:`Framing`; RFC 9112, section 6.1:
what follows its body cannot be trusted to be the next request, and a request
smuggled in the body would otherwise be served on the same connection).

Measuring costs two byte counts for an ordinary body: a body with no more
brackets than the bound cannot be deeper, and only one with more is scanned
(brackets outside strings, with a regular expression).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd._exceptions import ErrorCode
from agentd.api.errors import error_body
from agentd.api.guard import BodyTooLarge, send_json

#: The deepest a request body's JSON may nest (objects and arrays; the body itself is level 1).
MAX_JSON_DEPTH = 32
#: Methods whose body the routes read.
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep ``body``'s JSON nests (strings' contents aside), counted up to ``limit + 1``."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return body.count(b"[") + body.count(b"{")  # an upper bound within the limit is enough
    depth = deepest = 0
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return True  # FastAPI reads a body without a media type as JSON
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class JsonBody:
    """Refuse a body that is not JSON (415) or nests deeper than :data:`MAX_JSON_DEPTH` (422)."""

    def __init__(self, app: ASGIApp, max_depth: int = MAX_JSON_DEPTH) -> None:
        self._app = app
        self._max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self._app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        chunked = _header(scope, b"transfer-encoding") is not None
        if length in (None, "0") and not chunked:
            await self._app(scope, receive, send)
            return
        content_type = _header(scope, b"content-type")
        if not _is_json(content_type):
            media = (content_type or "").split(";", 1)[0].strip()
            refusal = f"the body is {media!r}; send application/json"
            await send_json(send, 415, error_body(ErrorCode.UNSUPPORTED_MEDIA_TYPE, refusal, "Content-Type"))
            return
        chunks: list[bytes] = []
        last: Message | None = None
        try:
            while True:
                got = await receive()
                if got["type"] != "http.request":
                    last = got  # the client went away: the route sees it as it would have
                    break
                chunks.append(got.get("body", b""))
                if not got.get("more_body", False):
                    break
        except BodyTooLarge as exc:
            await send_json(send, 413, error_body(ErrorCode.BODY_TOO_LARGE, str(exc.detail), "body"))
            return
        body = b"".join(chunks)
        depth = json_depth(body, self._max_depth)
        if depth > self._max_depth:
            await send_json(
                send,
                422,
                error_body(
                    ErrorCode.INVALID_INPUT,
                    f"the body nests more than {self._max_depth} levels of objects and arrays; "
                    f"the limit is {self._max_depth}",
                    "body",
                ),
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return last if last is not None else {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)


class Framing:
    """400 ``bad_request`` and ``Connection: close`` for a request with both ``Content-Length`` and
    ``Transfer-Encoding`` (nothing after it on the connection is read: the server closes it)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            names = {name for name, _value in scope.get("headers", ())}
            if b"content-length" in names and b"transfer-encoding" in names:
                await send_json(
                    send,
                    400,
                    error_body(
                        ErrorCode.BAD_REQUEST,
                        "the request has both Content-Length and Transfer-Encoding (RFC 9112 forbids it); "
                        "the connection is closed",
                        "Transfer-Encoding",
                    ),
                    [(b"connection", b"close")],
                )
                return
        await self._app(scope, receive, send)
