"""The small real MCP server of the tests (tests/mcp_tools_server.py) as a home's ``[mcp]`` tables,
for the tests of tool trust and of the dispatcher contract."""

from __future__ import annotations

import json
import sys

from tests.support import REPO

#: The server's script.
SERVER = REPO / "tests" / "mcp_tools_server.py"
#: Its ``weather`` tool as a persona's model is offered it (it answers "The weather in CITY is sunny, ...").
WEATHER = "mcp__tools__weather"
#: A persona file's table: every call of :data:`WEATHER` waits for an owner's approval.
APPROVAL = f'[tools."{WEATHER}"]\napproval = "required"\n'


def tools_server(name: str = "tools", extra: str = "") -> str:
    """agentd.toml lines: the test MCP server on stdio, as ``name`` (``extra``: more lines of its table)."""
    return f"""
[mcp]
restart_backoff_seconds = 0.1
[mcp.servers.{name}]
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]
timeout_seconds = 4
start_timeout_seconds = 120
{extra}
"""
