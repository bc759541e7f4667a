"""Operations: each thing agentd does, defined once, reached by every interface.

:mod:`agentd.ops.base` holds the conventions (read its docstring first); each module here
holds the operations of one subject, e.g. :mod:`agentd.ops.memory`, and :mod:`agentd.ops.models`
their request and result models (light to import: a client reads the daemon's answers with them).
HTTP routes, MCP tools, the model's skills and CLI commands are thin adapters over these functions.
"""

from agentd.ops.base import (
    OPERATIONS,
    OpContext,
    Operation,
    OpParts,
    Parts,
    Request,
    Result,
    operation,
    parse,
    tool_schema,
)

__all__ = [
    "OPERATIONS",
    "OpContext",
    "OpParts",
    "Operation",
    "Parts",
    "Request",
    "Result",
    "operation",
    "parse",
    "tool_schema",
]
