"""MCP servers whose tools personas use (``[mcp.servers.NAME]``, a persona's ``mcp_servers``).

:class:`~agentd.mcp.servers.ToolServers` keeps their connections;
:class:`~agentd.mcp.tools.McpToolbox` turns their tools into skills, so they are
offered, counted in the budget, called and recorded as every skill is. agentd's own
MCP server is :mod:`agentd.mcpserver`.
"""
