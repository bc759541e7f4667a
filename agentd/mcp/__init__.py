"""MCP, both ways: the MCP servers whose tools personas use (:mod:`agentd.mcp.client`) and agentd as
an MCP server (:mod:`agentd.mcp.server`). The two are layered apart (tests/test_layers.py): the client
is a model's toolbox under the runtime, the server an interface over it."""
