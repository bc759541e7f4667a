"""Approvals over HTTP: ``GET /v1/approvals`` and ``POST /v1/approvals/{id}``.

Who decides: admin keys; and a persona's ``owners`` for its own tools, through an adapter or
service key that names the owner as ``user`` (an adapter key only in its channels, and only
for an owner among the users it acts for: ``agentd keys create --users``). The
decision is made once (a second answers 409 ``already_decided``); the daemon then moves the
paused turn on at once (:meth:`agentd.runtime.Runtime.approval_decided`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from agentd._exceptions import Forbidden
from agentd.access.scopes import IDENTIFIER_PATTERN
from agentd.api.keys import Principal, Role
from agentd.api.roles import Policy, allow, caller_of, check_channel
from agentd.api.schemas import MAX_ID, MAX_NAME
from agentd.api.state import Daemon, daemon
from agentd.runtime.acting import check_acting
from agentd.schemas.responses import COMMON_ERRORS, error_responses
from agentd.skills.approvals import STATES, decide, get_approval, list_approvals, owns
from agentd.store.tools import Approval

router = APIRouter(tags=["approvals"], responses=COMMON_ERRORS)


class ApprovalOut(BaseModel):
    """One tool call waiting for (or given) an owner's decision."""

    model_config = ConfigDict(frozen=True)

    id: int
    persona: str
    channel: str
    message_id: int = Field(description="The user message whose turn waits.")
    tool: str
    arguments: Any = Field(description="The call's arguments, as the model sent them.")
    asked_by: str = Field(description="Who started the turn (whose rights the call has).")
    state: Literal["pending", "approved", "denied", "expired"]
    decided_by: str | None
    reason: str | None
    created_at: str
    expires_at: str = Field(description="When it is denied if nobody decides.")
    decided_at: str | None


class ApprovalList(BaseModel):
    """``GET /v1/approvals``."""

    model_config = ConfigDict(frozen=True)

    approvals: list[ApprovalOut]


class DecisionIn(BaseModel):
    """``POST /v1/approvals/{id}``: the decision."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=2000, description="Why (the model, and the person, are told).")
    user: str | None = Field(
        default=None,
        pattern=IDENTIFIER_PATTERN,
        description="The owner deciding (required for a key that is not an admin's: one of the persona's owners).",
    )


def _decider(request: Request, d: Daemon, approval: Approval, user: str | None) -> str:
    """Who decides, checked: an admin key, or one of the persona's owners through its key."""
    who = caller_of(request)
    if who is None or who.role is Role.ADMIN:
        return f"admin:{who.name}" if who is not None else "admin"
    check_channel(who, approval.channel)
    persona = d.app.personas[approval.persona]
    if not owns(persona, user):
        raise Forbidden(
            f"only an admin key or one of {persona.name}'s owners ({', '.join(persona.owners) or 'none'}) may "
            f"decide its approvals; give the owner as user"
        )
    if who.role is Role.ADAPTER:  # an adapter key speaks only for the users it owns (as when it posts)
        check_acting(who, str(user))
    return str(user)


def _visible(who: Principal | None, approval: Approval) -> bool:
    return who is None or who.role is Role.ADMIN or who.may_use_channel(approval.channel)


@router.get("/v1/approvals", response_model=ApprovalList, responses=error_responses(422), **allow(Policy.ANY))
async def list_route(
    request: Request,
    d: Annotated[Daemon, Depends(daemon)],
    state: Annotated[Literal["pending", "approved", "denied", "expired"] | None, Query()] = "pending",
    persona: Annotated[str | None, Query(min_length=1, max_length=MAX_NAME)] = None,
) -> dict[str, Any]:
    """The tool calls waiting for approval (``state``: others), newest first; a key that is not an
    admin's sees those of its channels."""
    assert state is None or state in STATES
    found = await run_in_threadpool(lambda: list_approvals(d.app.store, state, persona))
    who = caller_of(request)
    return {"approvals": [a.as_json() for a in found if _visible(who, a)]}


@router.post(
    "/v1/approvals/{approval_id}",
    response_model=ApprovalOut,
    responses=error_responses(403, 404, 409, 422),
    **allow(Policy.ANY),
)
async def decide_route(
    request: Request,
    approval_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    body: DecisionIn,
    d: Annotated[Daemon, Depends(daemon)],
) -> dict[str, Any]:
    """Approve or deny a tool call, once: approved, the daemon runs it and the turn goes on with
    its result; denied, it is never run and the turn goes on with the denial."""
    approval = await run_in_threadpool(lambda: get_approval(d.app.store, approval_id))
    by = _decider(request, d, approval, body.user)
    decided = await run_in_threadpool(lambda: decide(d.app.store, approval_id, body.decision, by, body.reason))
    d.runtime.approval_decided()
    return decided.as_json()
