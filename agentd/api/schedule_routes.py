"""Schedules over HTTP: ``GET/POST /v1/schedules``, ``GET/DELETE /v1/schedules/{id}``.

Admin and service keys. Each route is a thin adapter over its operation in
:mod:`agentd.ops.schedules` (the CLI's and the ``schedule`` tools' too), which decides who
reaches which schedules and checks the input: a bad ``at``, ``cron`` or ``timezone`` is 422
naming the field and why.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from agentd.access.scopes import IDENTIFIER_PATTERN
from agentd.api.roles import Acting, Policy, allow
from agentd.ops import schedules as ops
from agentd.ops.base import parse
from agentd.ops.fields import MAX_ID, MAX_NAME
from agentd.ops.schedules import NewScheduleBody, ScheduleList, ScheduleOut, ScheduleState
from agentd.schemas.responses import COMMON_ERRORS, error_responses

router = APIRouter(tags=["schedules"], responses=COMMON_ERRORS)

ScheduleId = Annotated[int, Path(ge=1, le=MAX_ID)]
UserParam = Annotated[str | None, Query(pattern=IDENTIFIER_PATTERN, description="Only this user's.")]


def _ref(schedule_id: int, user: str | None) -> ops.ScheduleRef:
    return parse(ops.ScheduleRef, {"id": schedule_id, "user": user})


@router.get("/v1/schedules", response_model=ScheduleList, responses=error_responses(422), **allow(Policy.SERVICE))
async def list_schedules(
    ctx: Acting,
    state: Annotated[ScheduleState | None, Query(description="Only those in this state.")] = None,
    persona: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME)] = None,
    user: UserParam = None,
) -> dict[str, Any]:
    """Schedules in every state, newest first, unless ``state``, ``persona`` or ``user`` filter them."""
    query = parse(ops.ScheduleQuery, {"state": state, "persona": persona, "user": user})
    return (await run_in_threadpool(ops.list_schedules, ctx, query)).as_json()


@router.post(
    "/v1/schedules",
    response_model=ScheduleOut,
    status_code=201,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def create_schedule(body: NewScheduleBody, ctx: Acting) -> dict[str, Any]:
    """Make a schedule: its persona takes a turn in ``channel`` at ``at``, or at each occurrence of
    ``cron`` in ``timezone``, triggered by ``text``."""
    return (await run_in_threadpool(ops.create, ctx, body)).as_json()


@router.get(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def get_schedule(schedule_id: ScheduleId, ctx: Acting, user: UserParam = None) -> dict[str, Any]:
    """One schedule (a service key: only its user's)."""
    return (await run_in_threadpool(ops.get, ctx, _ref(schedule_id, user))).as_json()


@router.delete(
    "/v1/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=error_responses(404, 422),
    **allow(Policy.SERVICE),
)
async def cancel_schedule(schedule_id: ScheduleId, ctx: Acting, user: UserParam = None) -> dict[str, Any]:
    """Cancel a schedule still to fire; answers it as it is now (one already fired, missed or
    cancelled is left so)."""
    return (await run_in_threadpool(ops.cancel, ctx, _ref(schedule_id, user))).as_json()
