"""``/mcp`` on the daemon: the MCP server over Streamable HTTP, behind the daemon's door.

The door (the Host check, then the key) has run before a request gets here: no
key where one is needed is a 401 like any other path. Each call acts for the
caller's key (its role decides which tools it may call, as on the HTTP API) and
for the persona, user and channel of the URL's query string
(``/mcp?persona=P&user=U&channel=C``) or, for clients that cannot add one, of the
``X-Agentd-Persona``, ``X-Agentd-User`` and ``X-Agentd-Channel`` headers.

Stateless and answered as JSON: every request stands alone, so the daemon keeps
no MCP session state and a client may talk to any daemon of a cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from agentd.access.identity import acting_user
from agentd.config import Config
from agentd.mcp.server.server import build_server
from agentd.mcp.server.tools import McpCaller, Session, Tools

#: The path the daemon serves MCP on.
PATH = "/mcp"
#: Where a session's persona, user and channel come from: the query parameter, else the headers.
FIELDS = ("persona", "user", "channel")


def session_from(request: Request, caller: McpCaller, config: Config) -> Session:
    """The session a request names, for ``caller`` (no user named: who the caller is, :mod:`agentd.access.identity`)."""
    found: dict[str, str | None] = {}
    for field in FIELDS:
        value = request.query_params.get(field)
        if value is None:
            value = request.headers.get(f"x-agentd-{field}") or request.headers.get(field)
        found[field] = value or None
    return Session(found["persona"], acting_user(found["user"], caller, config), found["channel"], caller)


class McpEndpoint:
    """The ASGI app of ``/mcp``; :meth:`running` is entered by the daemon's lifespan."""

    def __init__(
        self,
        tools: Tools,
        caller_of: Callable[[Scope], McpCaller | None],
        run_blocking: Callable[[Callable[[], dict[str, Any]]], Awaitable[dict[str, Any]]],
    ) -> None:
        """``caller_of``: the caller the door found in a request's scope."""
        self._caller_of = caller_of
        self._config = tools.config
        server = build_server(tools, self._session, run_blocking)
        self._manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> Session:
        request = ctx.request
        if not isinstance(request, Request):
            raise RuntimeError("an MCP call over HTTP came without its request")
        caller = self._caller_of(request.scope)
        if caller is None:  # the door lets no keyless request through; a bug if it did
            raise RuntimeError("an MCP call over HTTP came without a caller")
        return session_from(request, caller, self._config)

    def running(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group, for the daemon's lifespan."""
        return self._manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._manager.handle_request(scope, receive, send)
