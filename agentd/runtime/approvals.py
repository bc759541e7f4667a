"""The approvals desk: one per daemon, it moves paused turns on once they are decided.

Every ``POLL_SECONDS`` (and at once when a decision is made in this process, :meth:`ApprovalDesk.nudge`)
it:

1. denies the pending approvals whose ``[tools] approval_timeout_seconds`` ran out (state
   ``expired``);
2. claims each decided approval no daemon has claimed (a conditional update: one daemon wins,
   so a decision made by ``agentd approvals`` in another process, or on another daemon of a
   cluster, is re-enqueued once), sets its message ``pending`` again in the same transaction,
   and hands the turn to the dispatcher: local actors, a worker process, or the cluster's owner
   of the channel all answer it as any other turn, from the stored conversation
   (:mod:`agentd.runtime.pipeline.approval`);
3. releases the messages ``held`` behind a paused turn once nothing holds them (held → pending,
   conditional), in id order, through the dispatcher too.

A daemon that stops with a decision unclaimed leaves it to the next start; one that stops after
claiming leaves the message ``pending``, answered by ``resume_pending``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace

from agentd._exceptions import StoreError
from agentd.app import App
from agentd.observe.log import get_logger
from agentd.runtime.messages import Sink, Turn, resumed_turn
from agentd.runtime.pipeline.approval import AWAITING, HELD
from agentd.store.messages import Message
from agentd.store.schema import utcnow

log = get_logger("agentd.approvals")

#: How often the desk looks for decisions made elsewhere, time-outs and held messages (seconds).
POLL_SECONDS = 1.0


class ApprovalDesk:
    """Expires, claims and re-enqueues decided approvals, and releases held messages."""

    def __init__(self, app: App, route: Callable[[Turn], None], sink: Sink, poll: float = POLL_SECONDS) -> None:
        """``route``: the dispatcher's (the turn is stored already); ``sink``: where resumed turns'
        own events go (their listeners get them anyway)."""
        self._app = app
        self._route = route
        self._sink = sink
        self._poll = poll
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ApprovalDesk:
        """Sweep now and then every ``poll`` seconds, on a thread of its own."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="agentd-approvals", daemon=True)
            self._thread.start()
        return self

    def nudge(self) -> None:
        """A decision was made here: sweep now."""
        self._wake.set()

    def stop(self) -> None:
        """Stop sweeping (what is left is swept after the next start)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def sweep(self) -> int:
        """One pass (see the module docstring); how many turns it handed to the dispatcher."""
        store = self._app.store
        now = utcnow()
        timeout = self._app.config.tools.approval_timeout_seconds
        # Read first: an idle daemon's sweep takes no write turn (SQLite has one writer at a time).
        with store.read() as conn:
            due = store.approvals.due(conn, now)
            claimable = store.approvals.claimable(conn)
        if due:
            with store.write() as conn:
                for approval_id in due:
                    reason = f"no owner decided within {timeout:g} s ([tools] approval_timeout_seconds)"
                    store.approvals.decide(conn, approval_id, "expired", None, reason, now)
                claimable = store.approvals.claimable(conn)
        routed = 0
        for approval in claimable:
            with store.write() as conn:
                if not store.approvals.claim(conn, approval.id, now):
                    continue  # another daemon took it
                store.approvals.move(conn, approval.message_id, AWAITING, "pending")
                message = store.messages.get(conn, approval.message_id)
            routed += self._hand(message)
        return routed + self._release()

    def _release(self) -> int:
        """Held messages nothing holds any more: pending again, and answered, in id order."""
        store = self._app.store
        with store.read() as conn:
            held = [m for m in store.messages.with_status(conn, HELD) if m.persona is not None]
            free = [m for m in held if store.approvals.holding(conn, str(m.persona), m.channel, m.id) is None]
        routed = 0
        for message in free:
            with store.write() as conn:  # checked again where it is moved: a new pause may hold it now
                if store.approvals.holding(conn, str(message.persona), message.channel, message.id) is not None:
                    continue
                moved = store.approvals.move(conn, message.id, HELD, "pending")
            if moved:
                routed += self._hand(message)
        return routed

    def _hand(self, message: Message | None) -> int:
        if message is None or message.persona is None or message.persona not in self._app.personas:
            return 0
        # A request id of its own: the message was handed on before (its turn paused, or it was held),
        # and a worker process remembers the request ids it answered so as not to answer a message
        # twice when the daemon sends it again after a restart; under the old id it would drop this one.
        self._route(replace(resumed_turn(message, self._sink), request_id=uuid.uuid4().hex))
        return 1

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                routed = self.sweep()
                if routed:
                    log.info("approvals_resumed", turns=routed)
            except StoreError as exc:
                log.warning("approvals_sweep_failed", error=exc.message)
            self._wake.wait(self._poll)
            self._wake.clear()


__all__ = ["POLL_SECONDS", "ApprovalDesk"]
