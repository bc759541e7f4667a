"""The FastAPI application of ``agentd serve``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread
from fastapi import FastAPI
from starlette.routing import Route
from starlette.types import Scope

from agentd import __version__
from agentd.api import (
    admin,
    approvals,
    channels,
    chat,
    errors,
    memory_routes,
    monitoring,
    openai_compat,
    openapi,
    schedule_routes,
    users,
    web,
)
from agentd.api.access import AccessLog
from agentd.api.body import Framing, JsonBody
from agentd.api.guard import BodyLimit, HostGuard, KeyGuard, allowed_hosts
from agentd.api.mcp_route import LazyMcp
from agentd.api.openai_errors import OpenAIErrorShape
from agentd.api.roles import PRINCIPAL_KEY
from agentd.api.state import Daemon
from agentd.api.traces import TraceRequests
from agentd.observe import tracing
from agentd.observe.log import get_logger

if TYPE_CHECKING:
    from agentd.mcp.server.http import McpEndpoint
    from agentd.mcp.server.tools import McpCaller

#: The path of MCP over Streamable HTTP (agentd.mcp.server.http.PATH).
MCP_PATH = "/mcp"

log = get_logger("agentd.api")

DESCRIPTION = """\
agentd hosts LLM personas across chat channels, each with a long-term memory.

Authentication: when `[daemon] api_key` is set or a key was made with
`agentd keys create`, every endpoint but `/healthz` needs
`Authorization: Bearer <key>` or `X-API-Key: <key>`. Each operation admits
the roles listed in its `x-agentd-roles` (admin, adapter, service, metrics); another
role gets 403 `forbidden` with the reason.

Errors are JSON: `{"error": {"code", "field", "message"}}`.

MCP (Streamable HTTP) is served at `/mcp?persona=P&user=U&channel=C` with the
same keys; each tool admits the roles of its HTTP twin.
"""


def _caller_in(scope: Scope) -> McpCaller | None:
    """The caller the door put in a request's scope."""
    found: McpCaller | None = scope.get(PRINCIPAL_KEY)
    return found


def create_api(d: Daemon, *, resume_pending: bool | None = None, bind_host: str | None = None) -> FastAPI:
    """The API over a running daemon's parts.

    On start the channel hub binds to the server's event loop and listens to the
    runtime; messages accepted before a crash are answered (``runtime.resume_pending``).
    """
    cfg = d.app.config
    resume = cfg.runtime.resume_pending if resume_pending is None else resume_pending

    def mcp_endpoint() -> McpEndpoint:
        from agentd.mcp.server.http import McpEndpoint
        from agentd.mcp.server.tools import Tools

        return McpEndpoint(Tools(d.app, lambda: d.runtime), _caller_in, d.embedding_work)

    mcp = LazyMcp(mcp_endpoint, d.hub)

    @asynccontextmanager
    async def lifespan(_api: FastAPI) -> AsyncIterator[None]:
        d.hub.bind(asyncio.get_running_loop())
        d.runtime.add_listener(d.hub.listener)
        if resume:
            count = await to_thread.run_sync(d.runtime.resume_pending)
            if count:
                log.info("resumed_pending_messages", count=count)
        # Decided approvals are re-enqueued, undecided ones expire (after the resume: no turn twice).
        d.runtime.start_approvals()
        # After the pending messages: a firing stored before a crash is answered once, by them.
        await to_thread.run_sync(d.runtime.start_schedules)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(mcp.serve)
            try:
                yield
            finally:
                mcp.stop()

    # /docs and /redoc are agentd.api.web's: served from installed files, not a CDN.
    api = FastAPI(
        title="agentd", version=__version__, description=DESCRIPTION, lifespan=lifespan, docs_url=None, redoc_url=None
    )
    api.state.daemon = d
    errors.install(api)
    openapi.install(api, cfg, d.keys.required, lambda: list(d.app.personas))
    for module in (
        chat,
        channels,
        memory_routes,
        schedule_routes,
        users,
        approvals,
        admin,
        openai_compat,
        web,
        monitoring,
    ):
        api.include_router(module.router)
    # MCP over Streamable HTTP (agentd.mcp.server.http), behind the same door as every route.
    api.router.routes.append(Route(MCP_PATH, endpoint=mcp, methods=["GET", "POST", "DELETE"]))
    # The last added runs first: the Host, then the key, are checked before any body is read;
    # CatchAll is innermost, around the routes.
    api.add_middleware(errors.CatchAll)
    api.add_middleware(JsonBody)  # inside the body limit: it reads a body only once the key passed
    api.add_middleware(BodyLimit, limit=cfg.daemon.max_body_bytes)
    api.add_middleware(KeyGuard, keys=d.keys)
    api.add_middleware(HostGuard, allowed=allowed_hosts(bind_host, cfg.daemon.allowed_hosts))
    api.add_middleware(OpenAIErrorShape)  # outermost: OpenAI's error shape on its routes, 401s and 421s included
    api.add_middleware(Framing)  # a request framed two ways is refused before anything else
    api.add_middleware(AccessLog)  # outermost of all: every request logged and counted, refused ones too
    if tracing.enabled():  # [telemetry] otlp_endpoint: each request a span (agentd.api.traces)
        api.add_middleware(TraceRequests)
    return api
