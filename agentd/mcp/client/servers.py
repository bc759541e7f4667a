"""The MCP servers personas use (``[mcp.servers.NAME]``): one connection each, kept up.

A :class:`ToolServers` runs one event loop on a thread of its own (the ``mcp`` SDK
is async; the actors that call tools are threads). Each server is started on first
use, once per process — the daemon, or each worker process, runs its own —, and
its connection is held by one task that:

* starts it (a stdio command, or a Streamable HTTP session) and lists its
  tools, within ``start_timeout_seconds``;
* lists its tools every few seconds, and notices when that or a call finds it gone;
* starts it again after a backoff (``[mcp] restart_backoff_seconds``, doubling up
  to ``restart_max_backoff_seconds``) when it died or could not start;
* stops it (a stdio server's process ends) when :meth:`ToolServers.close` runs,
  with the daemon.

Every call is bounded by the server's ``timeout_seconds``; what goes wrong is one of
:class:`~agentd.McpUnavailable`, :class:`~agentd.McpTimeout` or
:class:`~agentd.McpToolError`, never anything else.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from agentd._exceptions import McpServerError, McpTimeout, McpToolError, McpUnavailable
from agentd.config import McpConfig, McpServerConfig
from agentd.observe.log import get_logger
from agentd.timing.backoff import Backoff

log = get_logger("agentd.mcp")

#: How often a connection is probed (its tools listed), to notice a server that died between calls.
PROBE_SECONDS = 10.0
#: A connection that stayed up this long starts its next backoff from the beginning.
HEALTHY_SECONDS = 30.0
#: Pages of ``tools/list`` read at most (a server that paginates forever is cut there).
MAX_TOOL_PAGES = 20
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: str, environ: Mapping[str, str], where: str) -> str:
    """``value`` with each ``${VAR}`` replaced by the environment variable (a missing one is an error)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ValueError(f"{where} needs the environment variable {name}, which is not set")
        return environ[name]

    return _VARIABLE.sub(one, value)


@dataclass(frozen=True)
class ServerStatus:
    """What ``agentd personas`` and ``agentd doctor`` say of a server."""

    name: str
    up: bool
    #: Its tools' names (as the server names them), when it is up.
    tools: tuple[str, ...]
    #: Why it is not up (empty when it is).
    error: str


class _Connection:
    """One server's connection, held by :meth:`supervise` on the loop; read from any thread."""

    def __init__(
        self, name: str, config: McpServerConfig, mcp: McpConfig, base_dir: Path, environ: Mapping[str, str]
    ) -> None:
        self.name = name
        self.config = config
        self._mcp = mcp
        self._base_dir = base_dir
        self._environ = environ
        self._changed = threading.Condition()
        #: Set once the first start has ended (up or failed): who waits for tools waits for it.
        self._attempted = False
        self._client: Client | None = None
        self._tools: tuple[types.Tool, ...] = ()
        self._error = "not started yet"
        self._dead: anyio.Event | None = None
        self._why_dead = ""
        self._stopping = False
        self._stop_event: anyio.Event | None = None
        self.task: Future[None] | None = None

    # -- read from any thread ---------------------------------------------------------------

    def wait_attempted(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until the first start has ended, one way or the other."""
        with self._changed:
            self._changed.wait_for(lambda: self._attempted, timeout)

    def wait_up(self, timeout: float) -> Client | None:
        """The connected client, waiting at most ``timeout`` for one (a restart in progress)."""
        with self._changed:
            self._changed.wait_for(lambda: self._client is not None or self._stopping, timeout)
            return self._client

    def status(self) -> ServerStatus:
        """Up or not, its tools, and why not."""
        with self._changed:
            up = self._client is not None
            return ServerStatus(
                self.name, up, tuple(t.name for t in self._tools) if up else (), "" if up else self._error
            )

    def tools(self) -> tuple[types.Tool, ...]:
        """Its tools as last listed (kept while it restarts: a call then says it is unavailable)."""
        with self._changed:
            return self._tools

    # -- on the loop ------------------------------------------------------------------------

    def _set(self, client: Client | None, error: str = "", tools: tuple[types.Tool, ...] | None = None) -> None:
        with self._changed:
            self._client = client
            if tools is not None:
                self._tools = tools
            if error:
                self._error = error
            self._attempted = True
            self._changed.notify_all()

    def stopping(self) -> bool:
        """True once :meth:`stop` ran."""
        with self._changed:
            return self._stopping

    def mark_dead(self, why: str) -> None:
        """A call found the server gone: the holder lets go and starts it again (on the loop)."""
        if self._dead is not None and not self._dead.is_set():
            self._why_dead = why
            self._dead.set()

    def stop(self) -> None:
        """Let go for good (on the loop)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._stop_event is not None:
            self._stop_event.set()
        self.mark_dead("stopped")

    async def supervise(self) -> None:
        """Hold the connection; start it again with backoff whenever it ends, until stopped."""
        self._stop_event = anyio.Event()
        # Doubling up to the maximum, without jitter (one server's restarts, not a crowd's).
        backoff = Backoff(self._mcp.restart_backoff_seconds, self._mcp.restart_max_backoff_seconds, jitter=0.0)
        while not self.stopping():
            began = time.monotonic()
            await self._hold()
            if self.stopping():
                break
            if time.monotonic() - began > HEALTHY_SECONDS:
                backoff.reset()
            delay = backoff.next()
            log.warning("mcp_server_down", server=self.name, error=self._error, restart_in_s=delay)
            with anyio.move_on_after(delay):
                await self._stop_event.wait()
        self._set(None, "stopped")

    async def _hold(self) -> None:
        """One connection, from start to end; its end's reason is kept as the error."""
        timeout = self.config.start_timeout_seconds
        self._dead = anyio.Event()
        self._why_dead = ""
        scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        connected = False
        try:
            with scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(self._client_for(stack))
                    tools = await self._list_tools(client)
                    scope.deadline = math.inf  # started: from now on only death or stop end it
                    connected = True
                    self._set(client, tools=tools)
                    log.info("mcp_server_up", server=self.name, tools=len(tools))
                    await self._watch(client)
                    self._set(None, f"it stopped answering ({self._why_dead})")
        except Exception as exc:  # whatever the transport raised: the server is down, and says why
            self._set(None, describe(exc) if not connected else f"the connection failed: {describe(exc)}")
            return
        if scope.cancelled_caught and not connected:
            self._set(None, f"it did not start within {timeout:g} s (start_timeout_seconds)")

    def _client_for(self, stack: AsyncExitStack) -> Client:
        cfg = self.config
        where = f"[mcp.servers.{self.name}]"
        if cfg.command:
            env = {k: expand(v, self._environ, f"{where} env.{k}") for k, v in cfg.env.items()}
            cwd = (self._base_dir / cfg.cwd).resolve() if cfg.cwd else None
            params = StdioServerParameters(command=cfg.command[0], args=cfg.command[1:], env=env or None, cwd=cwd)
            transport: Any = stdio_client(params, errlog=_errlog(stack))
        else:
            headers = {k: expand(v, self._environ, f"{where} headers.{k}") for k, v in cfg.headers.items()}
            http = create_mcp_http_client(headers=headers)
            stack.push_async_callback(http.aclose)
            transport = streamable_http_client(cfg.url, http_client=http)
        return Client(transport, read_timeout_seconds=cfg.timeout_seconds, cache=None)

    async def _list_tools(self, client: Client) -> tuple[types.Tool, ...]:
        found: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        allowed = self.config.tools
        return tuple(t for t in found if allowed is None or t.name in allowed)

    async def _watch(self, client: Client) -> None:
        """Until a call finds the server gone, a probe goes unanswered, or it is stopped."""
        assert self._dead is not None
        while not self._dead.is_set():
            with anyio.move_on_after(PROBE_SECONDS):
                await self._dead.wait()
            if self._dead.is_set():
                return
            try:
                # Listing its tools is the probe (ping is gone from the 2026 protocol), and it keeps
                # the list current when the server changes it.
                with anyio.fail_after(self.config.timeout_seconds):
                    tools = await self._list_tools(client)
            except Exception as exc:
                self._why_dead = f"listing its tools failed: {describe(exc)}"
                return
            self._set(client, tools=tools)

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool``; the server's errors, a timeout and a lost connection become agentd's."""
        client = self._client
        if client is None:
            raise McpUnavailable(self.name, f"it is not running ({self._error}); it is being started again")
        try:
            with anyio.fail_after(self.config.timeout_seconds):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise McpTimeout(
                self.name, f"{tool} did not answer within {self.config.timeout_seconds:g} s (timeout_seconds)"
            ) from None
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self.mark_dead(exc.message)
                raise McpUnavailable(
                    self.name, f"the connection closed during {tool}; it is being started again"
                ) from exc
            raise McpToolError(self.name, f"{tool} failed: {exc.message}") from exc
        except Exception as exc:  # the transport broke under the call
            self.mark_dead(describe(exc))
            raise McpUnavailable(self.name, f"{tool} failed: {describe(exc)}; it is being started again") from exc


def _errlog(stack: AsyncExitStack) -> TextIO:
    """Where a stdio server's stderr goes: the daemon's (what it logs is in the daemon's log stream),
    or nowhere when this process's stderr is no file (a test runner's capture)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115  (closed with the connection)
        stack.callback(devnull.close)
        return devnull
    return sys.stderr


def describe(exc: BaseException) -> str:
    """One line for an error, the first of a group's."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ToolServers:
    """The configured MCP servers of one process: started on first use, restarted, stopped by :meth:`close`."""

    def __init__(self, config: McpConfig, base_dir: Path, environ: Mapping[str, str] | None = None) -> None:
        """``base_dir``: where a relative ``cwd`` starts (the config file's directory)."""
        env = os.environ if environ is None else environ
        self._connections = {
            name: _Connection(name, server, config, base_dir, env) for name, server in config.servers.items()
        }
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def names(self) -> list[str]:
        """The configured servers."""
        return list(self._connections)

    def config(self, name: str) -> McpServerConfig:
        """One server's configuration."""
        return self._connections[name].config

    def start(self, names: Iterable[str]) -> None:
        """Start these servers (those not started yet), without waiting for them."""
        with self._lock:
            if self._closed:
                return
            loop = self._running_loop()
            for name in names:
                conn = self._connections[name]
                if conn.task is None:
                    conn.task = asyncio.run_coroutine_threadsafe(conn.supervise(), loop)

    def tools(self, name: str) -> tuple[types.Tool, ...]:
        """``name``'s tools (its allow-list applied), started and waited for first if need be
        (at most its ``start_timeout_seconds``); none when it could not start."""
        conn = self._connections[name]
        self.start([name])
        conn.wait_attempted(conn.config.start_timeout_seconds + 1)
        return conn.tools()

    def status(self, name: str) -> ServerStatus:
        """Whether ``name`` runs, starting it (and waiting for its first start) if need be."""
        conn = self._connections[name]
        self.start([name])
        conn.wait_attempted(conn.config.start_timeout_seconds + 1)
        return conn.status()

    def call(self, name: str, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool`` of server ``name`` (blocking, from any thread but the loop's), within its
        timeout; a server being started (again) is waited for first, within its ``start_timeout_seconds``."""
        conn = self._connections[name]
        timeout = conn.config.timeout_seconds
        self.start([name])
        if conn.wait_up(conn.config.start_timeout_seconds) is None:
            raise McpUnavailable(name, f"it is not running ({conn.status().error})")
        loop = self._loop
        if loop is None or self._closed:
            raise McpUnavailable(name, "agentd is stopping its MCP servers")
        future = asyncio.run_coroutine_threadsafe(conn.call(tool, arguments), loop)
        try:
            # The call bounds itself; this bound only guards against a loop that stopped answering.
            return future.result(timeout + 1)
        except FutureTimeout:
            future.cancel()
            raise McpTimeout(name, f"{tool} did not answer within {timeout:g} s (timeout_seconds)") from None
        except McpServerError:
            raise
        except Exception as exc:  # the loop went away under the call (shutdown)
            raise McpUnavailable(name, f"{tool} failed: {describe(exc)}") from exc

    def close(self, timeout: float = 5.0) -> None:
        """Stop every server (a stdio server's process ends) and the loop, within about ``timeout``."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        tasks = [c.task for c in self._connections.values() if c.task is not None]
        for conn in self._connections.values():
            loop.call_soon_threadsafe(conn.stop)
        for task in tasks:
            try:
                task.result(timeout)
            except Exception as exc:  # a server that would not stop in time is left to the process's end
                log.warning("mcp_server_stop_failed", error=describe(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            # A daemon thread: a stuck server must not keep the process from exiting.
            thread = threading.Thread(target=loop.run_forever, name="agentd-mcp", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop
