"""Operations: each thing agentd does, defined once, reached by every interface.

:mod:`agentd.ops.base` holds the conventions (read its docstring first); each module here
holds the operations of one subject, e.g. :mod:`agentd.ops.memory`. HTTP routes, MCP tools,
the model's skills and CLI commands are thin adapters over these functions.
"""

from agentd.ops.base import OPERATIONS, OpContext, Operation, Parts, Request, Result, operation, parse, tool_schema

__all__ = ["OPERATIONS", "OpContext", "Operation", "Parts", "Request", "Result", "operation", "parse", "tool_schema"]
