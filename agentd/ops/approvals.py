"""Approvals: list them and decide one, whoever asks (``/v1/approvals``, the web page, ``agentd approvals``).

An approval is decided once (a conditional update): the first decision stands and a second
is :class:`~agentd.AlreadyDecided`. Who may decide is decided here, once: an admin (a key's,
or the operator's on the command line) always; else one of the persona's ``owners``, named as
``user`` by a key that may use the approval's channel and, an adapter's, act for that user.
A key that is not an admin's lists the approvals of its channels only. The daemon's desk
(:mod:`agentd.runtime.approvals`) then moves the paused turn on, in whichever process decided.
"""

from __future__ import annotations

from agentd._exceptions import AlreadyDecided, Forbidden, NotFound
from agentd.access.scopes import DELEGATION_MARK
from agentd.ops.base import ADAPTER, ADMIN, OPERATOR, SERVICE, OpContext, operation
from agentd.ops.models import ApprovalDecision, ApprovalList, ApprovalOut, ApprovalQuery, ApprovalState, DecisionIn
from agentd.personas import Persona
from agentd.store import Store
from agentd.store.schema import utcnow
from agentd.store.tools import Approval

#: The decisions a caller may give, and the state each leaves.
DECISIONS = {"approve": "approved", "deny": "denied"}
#: The states an approval may be listed by.
STATES = ("pending", "approved", "denied", "expired")
#: Who may list and decide approvals (what each may reach is decided by the operations).
ROLES = (ADMIN, ADAPTER, SERVICE)


def owns(persona: Persona, user: str | None) -> bool:
    """True when ``user`` is one of ``persona``'s owners (who decide its tools' approvals)."""
    return user is not None and user in persona.owners


def _get(store: Store, approval_id: int) -> Approval:
    """One approval; :class:`~agentd.NotFound` when there is none."""
    with store.read() as conn:
        found = store.approvals.get(conn, approval_id)
    if found is None:
        raise NotFound("approval", approval_id, "agentd approvals list shows them")
    return found


def _decided(store: Store, approval_id: int, decision: str, by: str, reason: str | None) -> Approval:
    """Approve or deny a pending approval, once; the decided approval.

    One past its time is expired first (and :class:`~agentd.AlreadyDecided` says so).
    """
    now = utcnow()
    with store.write() as conn:
        found = store.approvals.get(conn, approval_id)
        if found is None:
            raise NotFound("approval", approval_id, "agentd approvals list shows them")
        if found.state == "pending" and found.expires_at <= now:
            store.approvals.decide(conn, approval_id, "expired", None, "no owner decided in time", now)
        elif store.approvals.decide(conn, approval_id, DECISIONS[decision], by, reason, now):
            decided = store.approvals.get(conn, approval_id)
            assert decided is not None
            return decided
    again = _get(store, approval_id)
    who = f" by {again.decided_by}" if again.decided_by else ""
    raise AlreadyDecided(f"approval {approval_id} was {again.state}{who} already; each is decided once")


def _decider(ctx: OpContext, approval: Approval, user: str | None) -> str:
    """Who decides, checked: an admin, or one of the persona's owners through a key that may speak for them."""
    if ctx.role == ADMIN:
        if ctx.via == "cli":
            return ctx.name  # the operator at the command line (their login)
        return "admin" if ctx.name == OPERATOR else f"admin:{ctx.name}"
    if DELEGATION_MARK in approval.channel:
        raise Forbidden(f"{approval.channel!r} is a delegation's internal channel: it is decided by an admin")
    ctx.check_channel(approval.channel)
    persona = ctx.parts.personas[approval.persona]
    if not owns(persona, user):
        raise Forbidden(
            f"only an admin key or one of {persona.name}'s owners ({', '.join(persona.owners) or 'none'}) may "
            f"decide its approvals; give the owner as user"
        )
    assert user is not None
    if ctx.role == ADAPTER:  # an adapter key speaks only for the users it owns (as when it posts)
        ctx.check_user(user)
    return user


def _visible(ctx: OpContext, approval: Approval) -> bool:
    return ctx.role == ADMIN or ctx.rights is None or ctx.rights.may_use_channel(approval.channel)


@operation("approval_list", roles=ROLES)
def list_approvals(ctx: OpContext, request: ApprovalQuery) -> ApprovalList:
    """The tool calls waiting for approval (``state``: others), newest first; a caller that is not
    an admin sees those of its channels."""
    store = ctx.parts.store
    with store.read() as conn:
        found = store.approvals.listed(conn, request.state, request.persona, request.limit)
    return ApprovalList(approvals=[ApprovalOut.of(a) for a in found if _visible(ctx, a)])


@operation("approval_decide", roles=ROLES)
def decide(ctx: OpContext, request: ApprovalDecision) -> ApprovalOut:
    """Approve or deny a tool call, once: approved, the daemon runs it and the turn goes on with
    its result; denied, it is never run and the turn goes on with the denial."""
    store = ctx.parts.store
    by = _decider(ctx, _get(store, request.id), request.user)
    return ApprovalOut.of(_decided(store, request.id, request.decision, by, request.reason))


__all__ = [
    "DECISIONS",
    "STATES",
    "ApprovalList",
    "ApprovalOut",
    "ApprovalQuery",
    "ApprovalDecision",
    "ApprovalState",
    "DecisionIn",
    "decide",
    "list_approvals",
    "owns",
]
