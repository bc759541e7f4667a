"""A person's data over HTTP: ``GET /v1/users/{user}/export`` and ``DELETE /v1/users/{user}`` (admin),
thin adapters over :mod:`agentd.ops.users`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from agentd.access.scopes import IDENTIFIER_PATTERN
from agentd.api.roles import Acting, Policy, allow
from agentd.api.schemas import MAX_NAME
from agentd.ops import users as ops
from agentd.schemas.responses import COMMON_ERRORS, error_responses

router = APIRouter(tags=["users"], responses=COMMON_ERRORS)
#: A user id in a path.
User = Annotated[str, Path(pattern=IDENTIFIER_PATTERN, description="1-128 characters, no whitespace.")]
#: Only what one persona keeps.
PersonaFilter = Annotated[
    str | None, Query(min_length=1, max_length=MAX_NAME, description="Only this persona's (default: every persona).")
]


@router.get(
    "/v1/users/{user}/export", response_model=ops.UserExport, responses=error_responses(422), **allow(Policy.ADMIN)
)
async def export(user: User, ctx: Acting, persona: PersonaFilter = None) -> ops.UserExport:
    """Everything kept about the user as one document (as ``agentd user export``)."""
    return await run_in_threadpool(lambda: ops.export(ctx, ops.UserRequest(user=user, persona=persona)))


@router.delete(
    "/v1/users/{user}", response_model=ops.UserForgotten, responses=error_responses(422), **allow(Policy.ADMIN)
)
async def forget(user: User, ctx: Acting, persona: PersonaFilter = None) -> ops.UserForgotten:
    """Erase everything kept about the user, in one transaction (as ``agentd user forget``):
    their messages and the replies to them, their memories, episodes, vectors, full-text
    entries and history; quotes of them elsewhere in their channels are redacted."""
    return await run_in_threadpool(lambda: ops.forget(ctx, ops.UserRequest(user=user, persona=persona)))
