"""Deciding approvals: what ``agentd approvals`` and ``/v1/approvals`` do, in one place.

An approval is decided once (a conditional update): the first decision stands and a second
is :class:`~agentd.AlreadyDecided`. Who may decide is the caller's business (admin keys and
the CLI always; a persona's ``owners`` for its own tools: :func:`owns`); the daemon's desk
(:mod:`agentd.runtime.approvals`) then moves the paused turn on, in whichever process decided.
"""

from __future__ import annotations

from agentd._exceptions import AlreadyDecided, InvalidInput, NotFound
from agentd.personas import Persona
from agentd.store import Store
from agentd.store.schema import utcnow
from agentd.store.tools import Approval

#: The decisions a caller may give, and the state each leaves.
DECISIONS = {"approve": "approved", "deny": "denied"}
#: The states an approval may be listed by.
STATES = ("pending", "approved", "denied", "expired")


def owns(persona: Persona, user: str | None) -> bool:
    """True when ``user`` is one of ``persona``'s owners (who decide its tools' approvals)."""
    return user is not None and user in persona.owners


def list_approvals(
    store: Store, state: str | None = None, persona: str | None = None, limit: int = 1000
) -> list[Approval]:
    """Approvals (in ``state``, of ``persona``), newest first."""
    if state is not None and state not in STATES:
        raise InvalidInput("state", f"must be one of {', '.join(STATES)}")
    with store.read() as conn:
        return store.approvals.listed(conn, state, persona, limit)


def get_approval(store: Store, approval_id: int) -> Approval:
    """One approval; :class:`~agentd.NotFound` when there is none."""
    with store.read() as conn:
        found = store.approvals.get(conn, approval_id)
    if found is None:
        raise NotFound("approval", approval_id, "agentd approvals list shows them")
    return found


def decide(store: Store, approval_id: int, decision: str, by: str, reason: str | None = None) -> Approval:
    """Approve or deny a pending approval, once; the decided approval.

    One past its time is expired first (and :class:`~agentd.AlreadyDecided` says so).
    """
    if decision not in DECISIONS:
        raise InvalidInput("decision", f"must be one of {', '.join(DECISIONS)}")
    if reason is not None and len(reason) > 2000:
        raise InvalidInput("reason", "must be at most 2000 characters")
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
    again = get_approval(store, approval_id)
    who = f" by {again.decided_by}" if again.decided_by else ""
    raise AlreadyDecided(f"approval {approval_id} was {again.state}{who} already; each is decided once")


__all__ = ["DECISIONS", "STATES", "decide", "get_approval", "list_approvals", "owns"]
