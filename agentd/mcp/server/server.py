"""The MCP server over :class:`~agentd.mcp.server.tools.Tools`: ``tools/list`` and ``tools/call``,
whatever the transport.

A failed call is a result with ``isError`` (never a protocol error): the model
sees ``{"error": {"code", "message", "field"}}`` with the catalogue's code. A bug
is logged and answered ``internal_error``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from anyio import to_thread
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from agentd import __version__
from agentd._exceptions import AgentdError
from agentd.mcp.server.tools import DEFINITIONS, Session, Tools, as_text, error_result
from agentd.observe.log import get_logger

log = get_logger("agentd.mcp")

INSTRUCTIONS = """\
agentd's long-term memory and its personas. `recall` searches what is remembered, \
`memory_context` gives a ready-to-paste `## Known Facts` block, `remember` stores a fact \
for later, `forget` and `list_memories` manage them, and `chat` asks a persona, which \
recalls on its own before it answers."""


def tool_list() -> list[types.Tool]:
    """The tools, with their descriptions and input schemas."""
    return [
        types.Tool(name=name, description=text, input_schema=schema) for name, (text, schema) in DEFINITIONS.items()
    ]


def build_server(
    tools: Tools,
    session_of: Callable[[ServerRequestContext[Any, Any]], Session],
    run_blocking: Callable[[Callable[[], dict[str, Any]]], Awaitable[dict[str, Any]]],
) -> Server[Any]:
    """An MCP server whose calls act for ``session_of(context)`` and run on ``run_blocking`` (``chat``,
    which waits for a turn, on anyio's default threads)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            session = session_of(ctx)
            work = lambda: tools.call(params.name, params.arguments, session)  # noqa: E731
            # chat waits for a whole turn: not on the threads searches need.
            result = await (to_thread.run_sync(work) if params.name == "chat" else run_blocking(work))
            error = False
        except AgentdError as exc:
            result, error = error_result(exc), True
        except Exception as exc:  # a bug: the caller gets internal_error, the log the traceback
            log.exception("mcp_tool_failed", tool=params.name)
            result, error = error_result(exc), True
        log.info("mcp_tool", tool=params.name, ok=not error, code=result["error"]["code"] if error else None)
        return types.CallToolResult(
            content=[types.TextContent(text=as_text(result))], structured_content=result, is_error=error
        )

    return Server(
        "agentd",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
