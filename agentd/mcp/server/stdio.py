"""``agentd mcp``: the MCP server on stdin/stdout, over the same store and config as the daemon.

Claude Desktop, Claude Code and other MCP clients launch it as a subprocess. The
store is the daemon's (both may run: SQLite in WAL mode and PostgreSQL take
concurrent writers); ``chat`` runs turns in a runtime of this process, started on
first use and stopped when the client closes the connection.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
from anyio import to_thread
from mcp.server.stdio import stdio_server

from agentd.app import App
from agentd.mcp.server.server import build_server
from agentd.mcp.server.tools import Session, Tools
from agentd.runtime import Runtime

#: Tool calls run at once on their own threads (each embeds or reads the store).
THREADS = 4


class _LazyRuntime:
    """The runtime ``chat`` needs, built by the first call (most sessions only search)."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None

    def __call__(self) -> Runtime:
        with self._lock:
            if self._runtime is None:
                self._runtime = Runtime(self._app)
            return self._runtime

    def stop(self) -> None:
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.stop(grace=self._app.config.daemon.shutdown_grace_seconds)


def serve_stdio(app: App, session: Session) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    runtime = _LazyRuntime(app)
    tools = Tools(app, runtime)
    limiter = anyio.CapacityLimiter(THREADS)

    async def run_blocking(work: Any) -> Any:
        return await to_thread.run_sync(work, limiter=limiter)

    server = build_server(tools, lambda _ctx: session, run_blocking)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        runtime.stop()
