"""How a CLI command calls an operation (:mod:`agentd.ops`): as the operator, with its flags as the
request's fields.

The person at the terminal owns the store: every command acts as
:meth:`~agentd.ops.base.OpContext.operator`, for the default user (``[user] name``, else the login
name) unless a flag names one. A refused value names the flag it came from (``--channel: ...``),
with the operation's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from agentd._exceptions import InvalidInput
from agentd.app import App
from agentd.ops.base import OpContext, parse

ModelT = TypeVar("ModelT", bound=BaseModel)


def operator(app: App, *, user: str | None = None) -> OpContext:
    """The operator, acting over ``app``'s parts (for ``user``, when the command has one)."""
    return OpContext.operator(app, user=user, via="cli")


def request(model: type[ModelT], flags: Mapping[str, str], **values: Any) -> ModelT:
    """``model`` from a command's values (``None``: not given, the model's default); an error names the
    flag (``flags`` maps a field, or its alias, to the flag that gives it)."""
    try:
        return parse(model, {k: v for k, v in values.items() if v is not None})
    except InvalidInput as exc:
        top, _, rest = exc.field.partition(".")
        flag = flags.get(top)
        if flag is None:
            raise
        raise InvalidInput(flag + (f".{rest}" if rest else ""), exc.reason) from None
