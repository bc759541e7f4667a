"""``/mcp``: agentd's MCP server over Streamable HTTP (:mod:`agentd.mcp.server.http`), loaded on first use.

The ``mcp`` SDK takes a second or more to import; a daemon that is never asked for
MCP never pays it, and one that is pays it on the first ``/mcp`` request (off the
event loop), not before it starts listening. The SDK's session manager runs in a
task of the daemon's lifespan (:meth:`LazyMcp.serve`), so it starts and stops
there, with the daemon.

``GET /mcp`` opens an event stream that stays open (the client's channel for what the
server would send unasked). Each counts against ``[daemon] max_followers_per_key`` and
``max_followers_per_channel`` as a ``/v1/channels/{c}/events`` feed does (its channel:
the session's, else ``mcp``), past them it is refused with the same 429
``too_many_followers``, a key that may not follow feeds or call tools (``metrics``)
is refused with 403, and the daemon ends every one when it shuts down
(:meth:`~agentd.api.feed.ChannelHub.hold`). Without the bound, a few hundred of them
took every connection the daemon keeps and ``/healthz`` went unanswered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import anyio
from anyio import to_thread
from starlette.types import Message, Receive, Scope, Send

from agentd._exceptions import AgentdError, ErrorCode, Forbidden, http_status
from agentd.api.errors import error_body
from agentd.api.feed import ChannelHub
from agentd.api.keys import Principal, Role
from agentd.api.roles import PRINCIPAL_KEY
from agentd.observe.log import get_logger

log = get_logger("agentd.api")

#: The roles that may hold a ``GET /mcp`` stream: those that may call one of its tools.
STREAM_ROLES = frozenset({Role.ADMIN, Role.ADAPTER, Role.SERVICE})
#: The channel a stream counts against when its session names none (MCP ``chat``'s default).
STREAM_CHANNEL = "mcp"


class LazyMcp:
    """The ASGI app of ``/mcp``: builds the endpoint with ``factory`` on the first request."""

    def __init__(self, factory: Callable[[], Any], hub: ChannelHub) -> None:
        """``factory``: builds the :class:`~agentd.mcp.server.http.McpEndpoint` (imports the SDK);
        ``hub``: counts the ``GET`` streams with the channel feeds, and ends them at shutdown."""
        self._factory = factory
        self._hub = hub
        self._endpoint: Any = None
        self._needed: anyio.Event | None = None
        self._ready: anyio.Event | None = None
        self._done: anyio.Event | None = None

    async def serve(self) -> None:
        """Run in the lifespan's task group: when first needed, build the endpoint and hold its
        session manager until :meth:`stop`."""
        self._needed, self._ready, self._done = anyio.Event(), anyio.Event(), anyio.Event()
        await self._needed.wait()
        if self._done.is_set():
            return
        try:
            endpoint = await to_thread.run_sync(self._factory)
            async with endpoint.running():
                self._endpoint = endpoint
                self._ready.set()
                await self._done.wait()
        except Exception as exc:  # the route answers 503 from now on, and the log says why
            log.exception("mcp_endpoint_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._endpoint = None
            self._ready.set()

    def stop(self) -> None:
        """Let :meth:`serve` end (the daemon stops)."""
        if self._done is not None and self._needed is not None:
            self._done.set()
            self._needed.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._needed is None or self._ready is None:
            await _unavailable(send, "the daemon is not serving yet")
            return
        self._needed.set()
        await self._ready.wait()
        endpoint = self._endpoint
        if endpoint is None:
            if self._done is not None and self._done.is_set():
                await _unavailable(send, "the daemon is stopping")
            else:
                await _unavailable(send, "MCP could not be loaded (see the daemon's log)", ErrorCode.INTERNAL_ERROR)
            return
        if scope.get("method") == "GET":
            await self._stream(endpoint, scope, receive, send)
            return
        await endpoint(scope, receive, send)

    async def _stream(self, endpoint: Any, scope: Scope, receive: Receive, send: Send) -> None:
        """A ``GET`` stream: refused to a metrics key, counted as a follower, ended at shutdown."""
        who = scope.get(PRINCIPAL_KEY)
        cancel = anyio.CancelScope()
        started = ended = False

        async def noted(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        try:
            if isinstance(who, Principal) and who.role not in STREAM_ROLES:
                raise Forbidden(
                    f"the {who.role} key {who.name!r} may not open an MCP event stream: it needs a key with "
                    f"the role {' or '.join(sorted(STREAM_ROLES))}"
                )
            key = who.name if isinstance(who, Principal) else ""
            with self._hub.hold(_session_channel(scope), key, cancel.cancel), cancel:
                await endpoint(scope, receive, noted)
        except AgentdError as exc:
            await _unavailable(send, exc.message, exc.code)
            return
        if started and not ended:  # ended by the daemon's shutdown: close the response cleanly
            with anyio.CancelScope(shield=True):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _session_channel(scope: Scope) -> str:
    """The channel a ``/mcp`` request's session names (query ``channel``, else the header), else
    :data:`STREAM_CHANNEL`."""
    query: bytes = scope.get("query_string", b"")
    named = parse_qs(query.decode("latin-1")).get("channel")
    if named and named[0]:
        return named[0]
    for key, value in scope.get("headers", ()):
        if key in (b"x-agentd-channel", b"channel") and value:
            return bytes(value).decode("latin-1")
    return STREAM_CHANNEL


async def _unavailable(send: Send, message: str, code: ErrorCode = ErrorCode.SHUTTING_DOWN) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": http_status(code),
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
