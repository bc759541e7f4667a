"""The scheduler: one thread per daemon that fires schedules when they are due.

It sleeps until the earliest due time (or ``[schedules] rescan_seconds``, whichever comes first:
a schedule made outside this daemon, by the CLI or another daemon, is noticed within that);
a schedule made or cancelled in this process wakes it at once (:func:`agentd.timing.schedules.on_change`).
There is no polling faster than that: 10,000 schedules a day away cost what none do.

A firing is one transaction (:meth:`~agentd.runtime.intake.Intake.fire`): the due schedule is
taken (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so of several daemons exactly one takes it;
SQLite has one writer, and the update is conditional on the state and due time read) and moved
on, and its trigger message (from ``schedule:<id>``, source ``schedule``, for the schedule's
user) is stored with it. Then the message is answered like any other: its turn is admitted,
ordered in its channel, its events reach followers and adapters. A message stored but not
answered before a crash is a pending message, answered after the next start
(``resume_pending``) or by the daemon that takes the channel over: exactly once.

Late schedules: at most ``[schedules] max_lateness_seconds`` late (a daemon down at its time) it
fires once; later, a one-off becomes ``missed`` and a recurring one moves to its next occurrence
without firing (never a burst of the occurrences it missed). Many due at once fire in batches
of ``[schedules] batch``, each firing through admission control with at most half the daemon's
bound (:data:`~agentd.runtime.intake.FIRING_SHARE`): people's messages keep room, and a firing
admission refuses waits and is tried again, never dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agentd._exceptions import AgentdError, InvalidInput
from agentd.observe import metrics
from agentd.observe.log import get_logger
from agentd.runtime.admission import Ticket
from agentd.runtime.intake import Intake
from agentd.runtime.pipeline.record import Incoming
from agentd.store.messages import Message
from agentd.store.schedules import Schedule
from agentd.timing.recurrence import next_occurrence
from agentd.timing.schedules import on_change

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = get_logger("agentd.schedules")

#: Seconds to wait before trying again a firing admission control refused.
RETRY_SECONDS = 0.5
#: Seconds between batches when more are due (people's messages get the writer in between).
BETWEEN_BATCHES = 0.01


@dataclass(frozen=True)
class Round:
    """What one round of firing did."""

    fired: int = 0
    missed: int = 0
    #: Due but refused by admission control (tried again shortly).
    deferred: int = 0
    #: As many were due as a batch holds (more may be).
    full: bool = False


class Scheduler:
    """Fires this daemon's due schedules through the intake; one thread, started with the daemon."""

    def __init__(self, intake: Intake, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._intake = intake
        self._app = intake.app
        self._config = self._app.config.schedules
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._undo: Callable[[], None] | None = None

    def start(self) -> Scheduler:
        """Start the thread (a round at once: what fell due while no daemon ran)."""
        self._undo = on_change(self.wake)
        self._thread = threading.Thread(target=self._run, name="agentd-scheduler", daemon=True)
        self._thread.start()
        log.info("scheduler_started", rescan_s=self._config.rescan_seconds)
        return self

    def wake(self) -> None:
        """Look again now (a schedule was made or cancelled)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop firing (a firing in progress completes or rolls back, never half)."""
        self._stopping = True
        if self._undo is not None:
            self._undo()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def fire_due(self) -> Round:
        """Fire what is due now: one batch, in one transaction."""
        now = self._clock()
        with self._app.store.read() as conn:  # nothing due: no write transaction at all
            due = self._app.store.schedules.next_due(conn)
        if due is None or due > now:
            return Round()
        counts = {"fired": 0, "missed": 0, "deferred": 0}
        fired: list[tuple[Schedule, float]] = []
        seen: list[int] = []

        def claim(conn: Connection, admit: Callable[[str, str], Ticket | None]) -> Sequence[tuple[Incoming, Ticket]]:
            due = self._app.store.schedules.due(conn, now, self._config.batch)
            seen.append(len(due))
            out: list[tuple[Incoming, Ticket]] = []
            for schedule in due:
                found = self._one(conn, schedule, now, admit)
                counts[found[0]] += 1
                if found[1] is not None:
                    out.append(found[1])
                    fired.append((schedule, (now - schedule.next_at).total_seconds() if schedule.next_at else 0.0))
            return out

        def record(conn: Connection, stored: Sequence[Message]) -> None:
            """Which message each firing stored (in the same transaction)."""
            for (schedule, _), message in zip(fired, stored, strict=True):
                self._app.store.schedules.set_message(conn, schedule.id, message.id)

        self._intake.fire(claim, record)
        for schedule, late in fired:
            metrics.schedule_fired(schedule.persona, "fired", late)
            log.info("schedule_fired", id=schedule.id, persona=schedule.persona, channel=schedule.channel, late_s=late)
        full = bool(seen and seen[0] >= self._config.batch)
        return Round(counts["fired"], counts["missed"], counts["deferred"], full)

    def _one(
        self, conn: Connection, schedule: Schedule, now: datetime, admit: Callable[[str, str], Ticket | None]
    ) -> tuple[str, tuple[Incoming, Ticket] | None]:
        """Decide one due schedule inside the firing's transaction: ``(outcome, what to store)``."""
        repo = self._app.store.schedules
        assert schedule.next_at is not None
        following = self._following(schedule, now)
        after = "scheduled" if following is not None else "fired"
        late = (now - schedule.next_at).total_seconds()
        if late > self._config.max_lateness_seconds or schedule.persona not in self._app.personas:
            repo.advance(conn, schedule, next_at=following, state="scheduled" if following else "missed")
            metrics.schedule_fired(schedule.persona, "missed")
            why = "late" if schedule.persona in self._app.personas else "unknown persona"
            log.warning("schedule_missed", id=schedule.id, persona=schedule.persona, late_s=round(late, 3), why=why)
            return "missed", None
        ticket = admit(schedule.persona, schedule.channel)
        if ticket is None:
            metrics.schedule_fired(schedule.persona, "deferred")
            return "deferred", None
        if not repo.advance(conn, schedule, next_at=following, state=after, fired_at=now):
            return "deferred", None  # another writer moved it first: its ticket is released
        item = self._intake.trigger(
            schedule.persona, schedule.channel, schedule.author, schedule.text, for_user=schedule.user
        )
        return "fired", (item, ticket)

    def _following(self, schedule: Schedule, now: datetime) -> datetime | None:
        """A recurring schedule's next occurrence after now (none missed in between is fired)."""
        if schedule.cron is None:
            return None
        try:
            return next_occurrence(schedule.cron, schedule.timezone or "UTC", now)
        except InvalidInput:
            return None

    def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                done = self.fire_due() if self._intake.accepting else Round()
                wait = self._wait(done)
            except AgentdError as exc:  # the store failing: try again later, never crash the thread
                log.warning("scheduler_failed", error=str(exc))
                wait = min(self._config.rescan_seconds, 5.0)
            if wait > 0:
                self._wake.wait(wait)

    def _wait(self, done: Round) -> float:
        """Seconds to sleep: until the earliest due time, at most ``rescan_seconds``."""
        if done.full:
            return BETWEEN_BATCHES
        if done.deferred:  # admission control asked to wait: try again soon, not at once
            return RETRY_SECONDS
        longest = self._config.rescan_seconds
        with self._app.store.read() as conn:
            due = self._app.store.schedules.next_due(conn)
        if due is not None:
            longest = min(longest, (due - self._clock()).total_seconds())
        if longest <= 0 and not (done.fired or done.missed):
            # Due, yet nothing was taken: another daemon holds those rows (SKIP LOCKED) until it commits.
            return RETRY_SECONDS / 10
        return max(0.0, longest)


__all__ = ["Round", "Scheduler"]
