"""MCP servers whose tools personas use (``[mcp.servers.NAME]``, a persona's ``mcp_servers``).

:class:`~agentd.mcp.client.servers.ToolServers` keeps their connections;
:class:`~agentd.mcp.client.tools.McpToolbox` turns their tools into skills, so they are
offered, counted in the budget, called and recorded as every skill is. agentd's own
MCP server is :mod:`agentd.mcp.server`.
"""
