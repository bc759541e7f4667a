"""Who may call what: each operation declares the roles it admits, and is checked against the caller.

The door (:class:`agentd.api.guard.KeyGuard`) finds the caller from its key and
puts the :class:`~agentd.api.keys.Principal` in the request's scope; each
route's dependency (:func:`allow`) refuses a role it does not admit with 403
``forbidden`` and the reason, before the body is looked at. Routes that name a
channel (in the path, or in the body for chat) also check that an adapter key's
globs match it, and that it is not a delegation's internal channel.

The roles an operation admits are published in the OpenAPI schema as
``x-agentd-roles`` (:data:`ROLES_EXTENSION`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Any

from fastapi import Depends, Request

from agentd._exceptions import Forbidden, UnauthorizedCaller
from agentd.api.keys import Principal, Role
from agentd.api.state import Daemon, daemon
from agentd.ops.base import OpContext
from agentd.ops.chat import refuse_delegation

#: The scope key the door stores the caller under.
PRINCIPAL_KEY = "agentd.principal"
#: The OpenAPI extension naming the roles an operation admits.
ROLES_EXTENSION = "x-agentd-roles"


class Policy(StrEnum):
    """Which callers an operation admits."""

    #: Operators only: memory administration, budgets.
    ADMIN = "admin"
    #: Admins, and adapters whose globs match the channel it names.
    CHANNEL = "channel"
    #: Admins and service keys (the read-only memory endpoints: any user's memories, for a service).
    SERVICE = "service"
    #: Admins and metrics keys (``/metrics``, ``/v1/usage``: read-only operations data).
    METRICS = "metrics"
    #: Any valid key.
    ANY = "any"
    #: No key needed (what it answers may depend on whether one was sent).
    OPEN = "open"


#: The roles each policy admits, as published.
ADMITTED: dict[Policy, tuple[str, ...]] = {
    Policy.ADMIN: (Role.ADMIN,),
    Policy.CHANNEL: (Role.ADMIN, Role.ADAPTER),
    Policy.SERVICE: (Role.ADMIN, Role.SERVICE),
    Policy.METRICS: (Role.ADMIN, Role.METRICS),
    Policy.ANY: (Role.ADMIN, Role.ADAPTER, Role.SERVICE),
    Policy.OPEN: ("anyone",),
}


def caller_of(request: Request) -> Principal | None:
    """The caller the door identified (``None``: no key was needed or given, on an open path)."""
    found = request.scope.get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else None


def _needs(policy: Policy) -> Callable[[Request], Awaitable[Principal | None]]:
    # ``async`` though it never awaits: FastAPI would run a plain function on a worker thread.
    async def check(request: Request) -> Principal | None:
        who = caller_of(request)
        if policy is Policy.OPEN:
            return who
        if who is None:  # the door lets no keyless request through to a guarded route
            raise UnauthorizedCaller("a valid API key is required")
        if who.role not in ADMITTED[policy]:
            admitted = " or ".join(ADMITTED[policy])
            raise Forbidden(f"the {who.role} key {who.name!r} may not do this: it needs a key with the role {admitted}")
        channel = request.path_params.get("channel")
        if policy is Policy.CHANNEL and isinstance(channel, str):
            check_channel(who, channel, write=request.method != "GET" or request.url.path.endswith("/events"))
        return who

    return check


def allow(policy: Policy) -> dict[str, Any]:
    """The route decorator arguments that admit ``policy``'s callers and publish it."""
    return {
        "dependencies": [Depends(_needs(policy))],
        "openapi_extra": {ROLES_EXTENSION: list(ADMITTED[policy])},
    }


def check_channel(who: Principal | None, channel: str, *, write: bool = True) -> None:
    """Refuse a channel this caller may not use, and a delegation's channel from outside.

    ``write``: posting, chatting or following; an admin may still read a
    delegation channel's stored messages (what a subagent was asked and said).
    """
    if write or who is None or who.role is not Role.ADMIN:
        refuse_delegation(channel)
    if who is not None and not who.may_use_channel(channel):
        globs = ", ".join(who.channels) or "none"
        raise Forbidden(f"the {who.role} key {who.name!r} may not use channel {channel!r} (its channels: {globs})")


async def acting(request: Request, d: Annotated[Daemon, Depends(daemon)]) -> OpContext:
    """FastAPI dependency: who an operation acts for, over the daemon's parts (no key: the operator;
    ``async``, as :func:`daemon`, so it costs no thread hop)."""
    who = caller_of(request)
    if who is None:
        return OpContext.operator(d.app, via="http")
    return OpContext(d.app, who.role, who.name, who, via="http")


#: The operation context of a route (``ctx: Acting``).
Acting = Annotated[OpContext, Depends(acting)]
