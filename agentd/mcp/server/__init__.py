"""agentd as an MCP server: its memory and its personas as tools, on stdio (``agentd mcp``) and
over Streamable HTTP (``/mcp`` on the daemon). The MCP servers personas use are
:mod:`agentd.mcp.client`."""
