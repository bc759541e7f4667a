"""Approvals over HTTP: ``GET /v1/approvals`` and ``POST /v1/approvals/{id}``.

Thin adapters over :mod:`agentd.ops.approvals` (``agentd approvals``' too), which decides who
may decide: admin keys; and a persona's ``owners`` for its own tools, through an adapter or
service key that names the owner as ``user`` (an adapter key only in its channels, and only
for an owner among the users it acts for: ``agentd keys create --users``). The decision is
made once (a second answers 409 ``already_decided``); the daemon then moves the paused turn on
at once (:meth:`agentd.runtime.Runtime.approval_decided`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from starlette.concurrency import run_in_threadpool

from agentd.api.roles import Acting, Policy, allow
from agentd.api.state import Daemon, daemon
from agentd.ops import approvals as ops
from agentd.ops.approvals import ApprovalList, ApprovalOut, ApprovalState, DecisionIn
from agentd.ops.base import parse
from agentd.ops.fields import MAX_ID, MAX_NAME
from agentd.schemas.responses import COMMON_ERRORS, error_responses

router = APIRouter(tags=["approvals"], responses=COMMON_ERRORS)


@router.get("/v1/approvals", response_model=ApprovalList, responses=error_responses(422), **allow(Policy.ANY))
async def list_route(
    ctx: Acting,
    state: Annotated[ApprovalState | None, Query()] = "pending",
    persona: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME)] = None,
) -> dict[str, Any]:
    """The tool calls waiting for approval (``state``: others), newest first; a key that is not an
    admin's sees those of its channels."""
    query = parse(ops.ApprovalQuery, {"state": state, "persona": persona})
    return (await run_in_threadpool(ops.list_approvals, ctx, query)).as_json()


@router.post(
    "/v1/approvals/{approval_id}",
    response_model=ApprovalOut,
    responses=error_responses(403, 404, 409, 422),
    **allow(Policy.ANY),
)
async def decide_route(
    ctx: Acting,
    approval_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    body: DecisionIn,
    d: Annotated[Daemon, Depends(daemon)],
) -> dict[str, Any]:
    """Approve or deny a tool call, once: approved, the daemon runs it and the turn goes on with
    its result; denied, it is never run and the turn goes on with the denial."""
    decided = await run_in_threadpool(ops.decide, ctx, body.to_request(approval_id))
    d.runtime.approval_decided()
    return decided.as_json()
