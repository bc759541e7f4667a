"""Turns answered by actors in this process: a supervisor, one actor per (persona, channel).

The default way of running, and what each worker process runs (:mod:`agentd.runtime.scaleout.worker`)
and each daemon of a cluster runs for the channels it owns (:mod:`agentd.runtime.scaleout.cluster`).
"""

from __future__ import annotations

import contextlib
import threading
from contextlib import AbstractContextManager
from typing import Any

import pykka

from agentd._exceptions import ErrorCode, StoreError
from agentd.observe.log import get_logger
from agentd.runtime.actors.actor import PersonaActor
from agentd.runtime.actors.supervisor import Supervisor
from agentd.runtime.dispatch import Parts, resume_pending
from agentd.runtime.events import Done, Error, Event
from agentd.runtime.group_commit import MAX_BATCH
from agentd.runtime.messages import ActorKey, Dispatch, HealthCheck, Sink, Turn, TurnState

log = get_logger("agentd.runtime")


class LocalActors:
    """A :class:`~agentd.runtime.dispatch.Dispatcher`: this process's supervisor and actors."""

    batch = MAX_BATCH

    def __init__(self, parts: Parts) -> None:
        self._app = parts.app
        self._runner = parts.runner
        self._inflight = parts.inflight
        self._learning = parts.learning
        self._inflight.add_listener(self._nudge_learning)
        self._supervisor = Supervisor.start(self._spawn, parts.app.config.runtime, self._unanswerable)
        self._learning.start()
        #: Set when :meth:`stop` begins: no turn starts after it (held with the lock while routing).
        self._draining = False
        self._routing = threading.Lock()

    def serial(self) -> AbstractContextManager[Any]:
        """Nothing to hold: only this runtime routes this store's messages."""
        return contextlib.nullcontext()

    def route(self, turn: Turn) -> None:
        """Track the turn and tell the supervisor, which sends it to the (persona, channel) actor
        (draining: the turn is not started, its message stays pending for the next start)."""
        with self._routing:
            if not self._draining:
                self._supervisor.tell(Dispatch(self._inflight.track(turn)))
                return
        turn.sink(Error(ErrorCode.SHUTTING_DOWN, _KEPT, turn.message_id))

    def resume_pending(self, sink: Sink) -> int:
        """Route every pending message of the store."""
        return resume_pending(self._app, sink, self.route)

    def health(self, timeout: float) -> dict[str, Any]:
        """The supervisor's account of its actors, and why this process's last write to the store
        failed (``store_failure``, until a write succeeds again)."""
        answer = self._supervisor.ask(HealthCheck(), timeout=timeout)
        assert isinstance(answer, dict)
        failure = self._app.store.write_failure
        return {**answer, "store_failure": failure} if failure else answer

    def learning_idle(self, timeout: float) -> bool:
        """Wait for this runtime's background jobs."""
        return self._learning.wait_idle(timeout)

    def worker_pids(self) -> list[int | None]:
        """None: turns are answered in this process."""
        return []

    def stop(self, grace: float) -> None:
        """Start no new turn (those queued stay pending), let the running replies finish within
        ``grace``, store the rest as interrupted (their messages stay pending), stop the actors."""
        inflight = self._inflight
        self._drain()
        if not inflight.wait_idle(grace):
            # Grace is over. Turns not started must not start now (they stay pending for the
            # next start); running ones are asked to stop and get a moment to store their part.
            for turn in inflight.turns():
                turn.draft.cancel.set()
                if turn.draft.state is TurnState.ACCEPTED:
                    self._interrupt(turn)
            inflight.wait_idle(min(2.0, max(grace, 0.5)))
            for turn in inflight.turns():
                self._interrupt(turn)
        try:
            self._supervisor.stop(timeout=5)
        except pykka.Timeout:
            log.warning("supervisor_stop_timeout")
        self._learning.stop()

    # -- internals ----------------------------------------------------------------------------

    def _drain(self) -> None:
        """Shutdown begins: the turns not started yet (queued behind another in their channel)
        never start; their messages stay pending and are answered after the next start. Only
        the running turns get the grace period."""
        with self._routing:
            self._draining = True
        withheld = [turn for turn in self._inflight.turns() if turn.draft.withhold()]
        for turn in withheld:
            turn.sink(Error(ErrorCode.SHUTTING_DOWN, _KEPT, turn.message_id))
        if withheld:
            log.info("drain_withheld", turns=len(withheld))

    def _nudge_learning(self, turn: Turn, event: Event) -> None:
        """A stored reply nudges the background jobs for its channel."""
        if isinstance(event, Done):
            self._learning.nudge(turn.channel)

    def _spawn(self, key: ActorKey, supervisor: pykka.ActorRef[Any], generation: int) -> pykka.ActorRef[Any]:
        persona = self._app.personas[key[0]]
        return PersonaActor.start(key, self._runner.responder(persona, key[1]), supervisor, generation)

    def _unanswerable(self, turn: Turn, code: ErrorCode, message: str) -> None:
        """A turn no actor will answer: mark it failed and tell its sink (runs on the supervisor)."""
        if turn.draft.finish(TurnState.FAILED):
            try:
                self._runner.writer.ended(
                    turn.persona, turn.channel, turn.message_id, turn.request_id, TurnState.FAILED, ""
                )
            except StoreError as exc:
                log.error("turn_outcome_not_stored", request_id=turn.request_id, code=code, store_error=exc.message)
                code, message = (
                    ErrorCode.STORE_ERROR,
                    (
                        f"{message}; the message could not be marked failed ({exc.message}): it stays pending "
                        "and is answered again after the daemon restarts"
                    ),
                )
        turn.sink(Error(code, message, turn.message_id))

    def _interrupt(self, turn: Turn) -> None:
        """Shutdown: store what a started turn has so far; turns not started stay pending for the next start."""
        started = turn.draft.state is TurnState.STARTED
        if not turn.draft.finish(TurnState.INTERRUPTED):
            return
        reply_id = None
        if started:
            code = ErrorCode.INTERRUPTED
            why = "agentd stopped before the reply was complete; the message is kept and answered after restart"
            try:
                reply_id = self._runner.writer.ended(
                    turn.persona,
                    turn.channel,
                    turn.message_id,
                    turn.request_id,
                    TurnState.INTERRUPTED,
                    turn.draft.text(),
                    resume=True,
                )
            except StoreError as exc:  # the message stays pending: answered after the next start
                log.error("turn_outcome_not_stored", request_id=turn.request_id, store_error=exc.message)
                code, why = ErrorCode.STORE_ERROR, f"{why}, and the store could not be written ({exc.message})"
        else:
            code, why = ErrorCode.SHUTTING_DOWN, _KEPT
        turn.sink(Error(code, why, turn.message_id, reply_id))


#: What the sink of a turn that shutdown kept from starting is told.
_KEPT = "agentd stopped first; the message is kept and answered after restart"

__all__ = ["LocalActors"]
