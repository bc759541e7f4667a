"""Storing, listing and cancelling schedules, and telling the scheduler (the operations of
:mod:`agentd.ops.schedules` check what every way in asks; persona routines are synced here).

A schedule is a persona's turn in a channel, optionally for a user, at one time (``at``) or at
each occurrence of a five-field ``cron`` in an IANA ``timezone``. The daemon's scheduler
(:mod:`agentd.runtime.scheduler`) fires it; a schedule made in the daemon's own process wakes
it at once (:func:`on_change`), one made elsewhere is noticed within ``[schedules]
rescan_seconds``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from agentd._exceptions import InvalidInput, NotFound
from agentd.config import Config
from agentd.personas import Personas
from agentd.store import Store
from agentd.store.schedules import STATES, NewSchedule, Schedule
from agentd.timing.recurrence import next_occurrence

#: Called with a schedule's next due time when one is made or cancelled in this process.
Listener = Callable[[], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def on_change(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` whenever a schedule is made or cancelled in this process; returns the undo."""
    with _lock:
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


def _changed() -> None:
    with _lock:
        found = list(_listeners)
    for listener in found:
        listener()


def make(store: Store, config: Config, new: NewSchedule) -> Schedule:
    """Store a checked schedule (:mod:`agentd.ops.schedules` checks it), at most ``[schedules]
    max_per_user`` active per user."""
    bound = config.schedules.max_per_user
    with store.write() as conn:
        if new.user is not None and store.schedules.active_count(conn, new.user) >= bound:
            raise InvalidInput(
                "user",
                f"{new.user!r} has {bound} active schedules already; the limit is {bound} "
                "([schedules] max_per_user): cancel one first",
            )
        made = store.schedules.add(conn, new)
    _changed()
    return made


def get(store: Store, schedule_id: int, user: str | None = None) -> Schedule:
    """One schedule (``user``: only if it is theirs); :class:`~agentd.NotFound` otherwise."""
    with store.read() as conn:
        found = store.schedules.get(conn, schedule_id)
    if found is None or (user is not None and found.user != user):
        raise NotFound("schedule", schedule_id)
    return found


def cancel(store: Store, schedule_id: int, user: str | None = None) -> Schedule:
    """Cancel a schedule still to fire (``user``: only if it is theirs); the schedule as it is now.
    One already fired, missed or cancelled is left as it is (and returned so)."""
    get(store, schedule_id, user)
    with store.write() as conn:
        store.schedules.cancel(conn, schedule_id)
        found = store.schedules.get(conn, schedule_id)
    assert found is not None
    _changed()
    return found


def listing(
    store: Store,
    *,
    state: str | None = None,
    persona: str | None = None,
    user: str | None = None,
    limit: int = 200,
) -> list[Schedule]:
    """Schedules, newest first, filtered as given (``state``: one of :data:`STATES`)."""
    if state is not None and state not in STATES:
        raise InvalidInput("state", f"must be one of {', '.join(STATES)}")
    with store.read() as conn:
        return store.schedules.find(conn, state=state, persona=persona, user=user, limit=limit)


def sync_routines(store: Store, personas: Personas) -> int:
    """Bring the stored routines in step with the persona files' ``[[routines]]`` (at the daemon's
    start): a new one is added, a changed one (or one no longer scheduled) is made afresh, one
    gone from its file is deleted; one unchanged keeps its next due time. How many changed."""
    now = datetime.now(UTC)
    changed = 0
    with store.write() as conn:
        for persona in personas.values():
            stored = {s.routine: s for s in store.schedules.routines(conn, persona.name)}
            for r in persona.routines:
                old = stored.pop(r.name, None)
                same = old is not None and (old.cron, old.timezone, old.channel, old.text) == (
                    r.cron,
                    r.timezone,
                    r.channel,
                    r.prompt,
                )
                if same and old is not None and old.state == "scheduled":
                    continue
                first = next_occurrence(r.cron, r.timezone, now)
                new = NewSchedule(
                    persona.name, r.channel, None, r.prompt, first, "routine", cron=r.cron, timezone=r.timezone
                )
                store.schedules.replace_routine(conn, old, replace(new, routine=r.name))
                changed += 1
            for old in stored.values():
                store.schedules.replace_routine(conn, old, None)
                changed += 1
    if changed:
        _changed()
    return changed


__all__ = ["STATES", "cancel", "get", "listing", "make", "on_change", "sync_routines"]
