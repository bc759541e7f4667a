"""A person's data, defined once: ``user_export`` and ``user_forget``.

Reached by ``GET /v1/users/{user}/export`` and ``DELETE /v1/users/{user}``
(:mod:`agentd.api.users`) and ``agentd user export|forget`` (:mod:`agentd.cli.user`); admin only.
The user id is checked by :mod:`agentd.memory.people` (which also accepts an id stored before the
identifier rules tightened, so such a person can still be exported and erased).
"""

from __future__ import annotations

from agentd.ops.base import ADMIN, OpContext, operation
from agentd.ops.models import UserExport, UserForgotten, UserRequest

__all__ = ["UserExport", "UserForgotten", "UserRequest", "export", "forget"]


@operation("user_export", roles=(ADMIN,))
def export(ctx: OpContext, request: UserRequest) -> UserExport:
    """Everything kept about the user as one document."""
    from agentd.memory.people import export_user  # on first use, as every module the CLI may not need

    return UserExport.model_validate(export_user(ctx.parts.store, request.user, request.persona))


@operation("user_forget", roles=(ADMIN,))
def forget(ctx: OpContext, request: UserRequest) -> UserForgotten:
    """Erase everything kept about the user, in one transaction."""
    from agentd.memory.people import forget_user

    erased = forget_user(ctx.parts.store, request.user, request.persona)
    return UserForgotten.model_validate({"user": request.user, "persona": request.persona, **erased.as_json()})
