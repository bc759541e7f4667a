"""The turns in flight in one runtime, and the fan-out of their events.

A turn is tracked from the moment it is handed to what answers it (a local
actor, a worker process) until its ``Done`` or ``Error``. Each of its events goes,
in this order, to the runtime's listeners (the channel feeds, the background
jobs' nudge), to the turn's own sink, and to the outward relays (the other
daemons of a cluster); a listener or sink that raises breaks nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from agentd.observe.log import get_logger
from agentd.runtime.events import Done, Error, Event
from agentd.runtime.messages import Sink, Turn

log = get_logger("agentd.runtime")

#: Listeners see every turn's events (the daemon's channel feeds).
Listener = Callable[[Turn, Event], None]


class InFlight:
    """The turns being answered here (and the subagents they run), and where their events go."""

    def __init__(self, listeners: tuple[Listener, ...] = ()) -> None:
        self._listeners = list(listeners)
        self._outward: list[Listener] = []
        self._turns: dict[str, Turn] = {}
        self._subagents: dict[int, Turn] = {}
        self._changed = threading.Condition()

    def add_listener(self, listener: Listener) -> None:
        """Also send every event of every turn to ``listener`` (called from actor threads)."""
        self._listeners.append(listener)

    def add_outward(self, listener: Listener) -> None:
        """Send every event of a turn tracked here to ``listener`` after its sink had it."""
        self._outward.append(listener)

    def track(self, turn: Turn) -> Turn:
        """``turn`` as it is answered here: tracked, its events fanned out; done with it on Done/Error."""
        tracked = replace(turn, sink=self._fanout(turn))
        with self._changed:
            self._turns[turn.request_id] = tracked
        return tracked

    def get(self, request_id: str) -> Turn | None:
        """The tracked turn of ``request_id`` (None once it ended)."""
        with self._changed:
            return self._turns.get(request_id)

    def turns(self) -> list[Turn]:
        """The tracked turns, at this moment."""
        with self._changed:
            return list(self._turns.values())

    def message_ids(self) -> set[int]:
        """The message ids of the turns in flight."""
        with self._changed:
            return {t.message_id for t in self._turns.values()}

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no turn is in flight; False if ``timeout`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._turns, timeout=timeout)

    def deliver(self, turn: Turn, event: Event) -> None:
        """An event of a turn answered elsewhere: to the listeners, as if the turn ran here."""
        for listener in self._listeners:
            try:
                listener(turn, event)
            except Exception:
                log.exception("listener_failed", request_id=turn.request_id)

    @contextmanager
    def subagent(self, turn: Turn) -> Iterator[None]:
        """While a subagent's turn runs (inline, within its caller's): shutdown can find its cancel flag."""
        with self._changed:
            self._subagents[turn.message_id] = turn
        try:
            yield
        finally:
            with self._changed:
                self._subagents.pop(turn.message_id, None)

    def cancel_of(self, message_id: int | None) -> threading.Event | None:
        """The cancel flag of the turn (or running subagent) answering ``message_id``."""
        with self._changed:
            for turn in (*self._turns.values(), *self._subagents.values()):
                if turn.message_id == message_id:
                    return turn.draft.cancel
        return None

    def _fanout(self, turn: Turn) -> Sink:
        def emit(event: Event) -> None:
            # The listeners first (the channel's feed, the background jobs' nudge): a caller that
            # has its turn's Done and then waits for the jobs (learning_idle) finds them nudged.
            self.deliver(turn, event)
            try:
                turn.sink(event)
            except Exception:  # a broken sink must not break the turn
                log.exception("listener_failed", request_id=turn.request_id)
            for outward in self._outward:
                outward(turn, event)
            if isinstance(event, Done | Error):
                with self._changed:
                    self._turns.pop(turn.request_id, None)
                    self._changed.notify_all()

        return emit


__all__ = ["InFlight", "Listener"]
