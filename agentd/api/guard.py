"""The door: the Host check, the key check and the request body limit, as plain ASGI middleware.

All answer before the application reads anything: a request addressed to a host
the daemon does not serve is refused (421: a web page that rebinds its own DNS
name to 127.0.0.1 cannot reach a key-less daemon), a request without the key is
refused whatever its body, and a body larger than ``daemon.max_body_bytes`` is
refused by its ``Content-Length`` or, when chunked, as soon as it grows past the
limit (nothing of it is handled).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from anyio import CapacityLimiter, to_thread
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd._exceptions import ErrorCode
from agentd.api.errors import error_body
from agentd.api.keys import KeyBook
from agentd.api.preflight import is_loopback
from agentd.api.roles import PRINCIPAL_KEY
from agentd.api.web import PUBLIC_PATHS

#: Threads that look keys up in the store.
KEY_THREADS = 4
#: Paths that never need the key (liveness probes, the web page that asks for it).
OPEN_PATHS = frozenset({"/healthz", *PUBLIC_PATHS})


#: Names a loopback daemon always answers to.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_hosts(bind_host: str | None, configured: Sequence[str]) -> frozenset[str] | None:
    """The Host names to serve (``None``: any).

    ``[daemon] allowed_hosts`` when set (plus the loopback names); otherwise the
    loopback names and the bound address, or any host when the daemon listens
    beyond loopback (it then requires an API key, which is what guards it).
    """
    if "*" in configured:
        return None
    if configured:
        return LOOPBACK_NAMES | {h.strip().lower().strip("[]") for h in configured}
    if bind_host is not None and not is_loopback(bind_host):
        return None
    return LOOPBACK_NAMES | ({bind_host.strip().lower().strip("[]")} if bind_host else set())


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without port or IPv6 brackets, lower case."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _host_allowed(name: str, allowed: frozenset[str]) -> bool:
    if name in allowed:
        return True
    return any(h.startswith(".") and (name.endswith(h) or name == h[1:]) for h in allowed)


class HostGuard:
    """Refuse requests whose ``Host`` is not one this daemon serves (421 ``host_not_allowed``)."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str] | None) -> None:
        self._app = app
        self._allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed is None:
            await self._app(scope, receive, send)
            return
        header = _header(scope, b"host")
        name = host_name(header) if header is not None else None
        if name is not None and _host_allowed(name, self._allowed):
            await self._app(scope, receive, send)
            return
        # No Host at all (HTTP/1.0 may omit it; HTTP/1.1 without one never gets here) is not a host
        # this daemon serves either: the check must not be skipped by leaving the header out.
        refusal = (
            "the request names no host (no Host header): send one"
            if name is None
            else f"this daemon does not serve the host {name!r}; add it to [daemon] allowed_hosts "
            "if a proxy forwards it"
        )
        await send_json(send, 421, error_body(ErrorCode.HOST_NOT_ALLOWED, refusal, "Host"))


async def send_json(send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer with a JSON body, from a middleware (before the application ran)."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class KeyGuard:
    """Finds the caller from ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``.

    A valid key (the config's, or one made with ``agentd keys create`` and not
    revoked) puts its :class:`~agentd.api.keys.Principal` in the scope for the
    routes' role checks (:mod:`agentd.api.roles`). When no key is configured or
    stored (a loopback daemon) every caller is the local admin, whatever it sends; else
    only :data:`OPEN_PATHS` answer (``/healthz`` then says only that the daemon
    is up), and every other path is refused with 401 whatever the body.
    """

    def __init__(self, app: ASGIApp, keys: KeyBook) -> None:
        self._app = app
        self._keys = keys
        # Threads of its own: the key lookup (one indexed read) never queues behind turns or searches.
        self._threads = CapacityLimiter(KEY_THREADS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        given = _header(scope, b"x-api-key")
        auth = _header(scope, b"authorization")
        if given is None and auth is not None and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        open_path = scope["path"] in OPEN_PATHS
        # LOCAL_ADMIN for a loopback daemon with no key, whatever a client sends; one read either way.
        principal = await to_thread.run_sync(self._keys.caller, given, limiter=self._threads)
        if principal is not None or open_path:
            scope[PRINCIPAL_KEY] = principal
            await self._app(scope, receive, send)
            return
        reason = "a valid API key is required" if given is None else "the API key is not valid (or was revoked)"
        await send_json(
            send,
            401,
            error_body(
                ErrorCode.UNAUTHORIZED,
                f"{reason}: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
                "Authorization",
            ),
            [(b"www-authenticate", b'Bearer realm="agentd"')],
        )


class BodyTooLarge(HTTPException):
    """A chunked body grew past the limit (raised from ``receive``; FastAPI passes HTTPExceptions on)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes (daemon.max_body_bytes)")
        self.field = "body"


class BodyLimit:
    """Refuse request bodies larger than ``limit`` bytes with 413."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await send_json(
                    send, 400, error_body(ErrorCode.BAD_REQUEST, "Content-Length is not a number", "Content-Length")
                )
                return
            if size > self._limit:
                await send_json(
                    send,
                    413,
                    error_body(
                        ErrorCode.BODY_TOO_LARGE,
                        f"the request body is {size} bytes; the limit is {self._limit} bytes (daemon.max_body_bytes)",
                        "body",
                    ),
                )
                return
        received = 0
        limit = self._limit

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self._app(scope, limited, send)
