"""``/mcp``: agentd's MCP server over Streamable HTTP (:mod:`agentd.mcpserver.http`), loaded on first use.

The ``mcp`` SDK takes a second or more to import; a daemon that is never asked for
MCP never pays it, and one that is pays it on the first ``/mcp`` request (off the
event loop), not before it starts listening. The SDK's session manager runs in a
task of the daemon's lifespan (:meth:`LazyMcp.serve`), so it starts and stops
there, with the daemon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
from anyio import to_thread
from starlette.types import Receive, Scope, Send

from agentd._exceptions import ErrorCode, http_status
from agentd.api.errors import error_body
from agentd.log import get_logger

log = get_logger("agentd.api")


class LazyMcp:
    """The ASGI app of ``/mcp``: builds the endpoint with ``factory`` on the first request."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        """``factory``: builds the :class:`~agentd.mcpserver.http.McpEndpoint` (imports the SDK)."""
        self._factory = factory
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
        await endpoint(scope, receive, send)


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
