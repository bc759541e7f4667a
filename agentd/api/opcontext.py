"""The operations' context of an HTTP request: who the door let in (:mod:`agentd.ops.base`)."""

from __future__ import annotations

from fastapi import Request

from agentd.api.roles import caller_of
from agentd.api.state import Daemon
from agentd.ops.base import OpContext


def op_context(request: Request, d: Daemon) -> OpContext:
    """The caller of ``request`` as an operation sees it: its key's role, name and rights, or the
    operator (no key was needed: a daemon without keys)."""
    who = caller_of(request)
    if who is None:
        return OpContext.operator(d.app, via="http")
    return OpContext(d.app, role=str(who.role), name=who.name, rights=who, via="http")


__all__ = ["op_context"]
