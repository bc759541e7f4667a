"""MCP servers' tools as skills: offered as ``mcp__SERVER__TOOL``, called through :class:`ToolServers`.

A persona's ``mcp_servers`` tools join its skills in the one registry, so they are
offered to its model, counted in its budget, shown as ``tool_call`` /
``tool_result`` events and kept in the context record as every skill is.

Names: ``mcp__`` + the server's name + ``__`` + the tool's, with characters a model
API refuses replaced by ``_``. A server's name never holds ``__`` nor ends with
``_`` (agentd.toml is checked), so two servers' tools never share a name.

A result is data: its text goes back to the model as one JSON string (every line
break escaped, so it cannot open a prompt section or fake a role), cut to the
server's ``max_result_chars`` with a note saying how much was left out.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import mcp_types as types

from agentd._exceptions import McpToolError
from agentd.mcp.client.servers import ToolServers
from agentd.personas import Persona
from agentd.skills.registry import Skill, SkillCaller, function_tool
from agentd.text.quoting import LINE_BREAKS

#: Prefix of every MCP tool's name, as models see it.
PREFIX = "mcp__"
#: The longest function name model APIs take.
MAX_NAME = 64
#: The longest tool description offered (a server's may be a manual).
MAX_DESCRIPTION = 1024
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def offered_name(server: str, tool: str) -> str:
    """``mcp__SERVER__TOOL``, within what model APIs accept (a long one keeps a hash of the whole)."""
    name = f"{PREFIX}{server}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The tool's input schema as a function's parameters (always an object with properties)."""
    parameters = dict(schema) if isinstance(schema, dict) else {}
    parameters["type"] = "object"
    parameters.setdefault("properties", {})
    return parameters


def result_text(result: types.CallToolResult) -> str:
    """What a result says, as text: text blocks as they are, other blocks named (not inlined)."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type} ({block.mime_type}) not shown]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {inner.uri} (binary) not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def bounded(text: str, limit: int, tool: str) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, with a note of what was left out; and whether it was cut."""
    # Line breaks JSON leaves as they are (U+2028, ...) become plain newlines, which it escapes.
    text = LINE_BREAKS.sub(lambda m: "\n" * len(m.group()), text)
    if len(text) <= limit:
        return text, False
    return f"{text[:limit]}\n[… cut: {len(text) - limit} more characters of {tool}'s result not shown]", True


class McpTool:
    """One tool of one MCP server, as a skill."""

    def __init__(self, servers: ToolServers, server: str, tool: types.Tool) -> None:
        self._servers = servers
        self._server = server
        self._tool = tool
        self.name = offered_name(server, tool.name)

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry: the server's description and input schema."""
        about = (self._tool.description or self._tool.title or self._tool.name).strip()
        description = f"{about[:MAX_DESCRIPTION]} (tool {self._tool.name!r} of the MCP server {self._server!r})"
        function = function_tool(self.name, description, {}, [])
        function["function"]["parameters"] = _parameters(self._tool.input_schema)
        return function

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Call the tool (bounded in time); its text, bounded in size, or an MCP error."""
        result = self._servers.call(self._server, self._tool.name, arguments)
        limit = self._servers.config(self._server).max_result_chars
        text, cut = bounded(result_text(result), limit, self._tool.name)
        if result.is_error:
            raise McpToolError(self._server, f"{self._tool.name} failed: {text[:2000]}")
        found: dict[str, Any] = {"server": self._server, "tool": self._tool.name, "content": text}
        if cut:
            found["truncated"] = True
        return found


class McpToolbox:
    """The tools of the MCP servers each persona lists (the skills registry asks it per turn)."""

    def __init__(self, servers: ToolServers) -> None:
        self._servers = servers

    @property
    def servers(self) -> ToolServers:
        """The servers' connections."""
        return self._servers

    def skills_for(self, persona: Persona) -> list[Skill]:
        """The tools of ``persona``'s servers that are up (a server that cannot start offers none)."""
        found: list[Skill] = []
        for server in persona.mcp_servers:
            found.extend(McpTool(self._servers, server, tool) for tool in self._servers.tools(server))
        return found
