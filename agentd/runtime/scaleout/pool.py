"""The worker pool: a :class:`~agentd.runtime.dispatch.Dispatcher` over the worker processes
(:mod:`agentd.runtime.scaleout.workers`), each running local actors; their events come back to
the turns tracked here, as if the turns had run in this process."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from agentd._exceptions import ErrorCode, StoreError
from agentd.app import App
from agentd.observe.log import get_logger
from agentd.runtime.dispatch import Parts, resume_pending
from agentd.runtime.events import Error, Event
from agentd.runtime.group_commit import MAX_BATCH
from agentd.runtime.messages import Sink, Turn
from agentd.runtime.scaleout.workers import Workers

log = get_logger("agentd.workers")


class WorkerPool:
    """A :class:`~agentd.runtime.dispatch.Dispatcher`: the worker processes answer the turns, each
    running local actors; their events come back to the turns tracked here."""

    batch = MAX_BATCH

    def __init__(self, parts: Parts, count: int) -> None:
        """``count``: how many worker processes."""
        self._app: App = parts.app
        self._inflight = parts.inflight
        parts.app.store.share_writes()  # the workers write to the same database
        self._workers = Workers(
            parts.app.config, count, self._relayed, self._restarted, preload=parts.app.turn_modules()
        ).start()

    def serial(self) -> AbstractContextManager[Any]:
        """Nothing to hold: only this daemon routes this store's messages."""
        return contextlib.nullcontext()

    def route(self, turn: Turn) -> None:
        """Track the turn and send it to the worker that owns its channel."""
        self._workers.route(self._inflight.track(turn))

    def resume_pending(self, sink: Sink) -> int:
        """Route every pending message of the store."""
        return resume_pending(self._app, sink, self.route)

    def health(self, timeout: float) -> dict[str, Any]:
        """Every worker's actors, whether each worker answered, and the workers' failed writes to the
        store (``store_failure``)."""
        answers = self._workers.ask("health", timeout)
        actors = [a for answer in answers if answer for a in answer.get("actors", [])]
        healthy = all(answer is not None and answer.get("healthy", True) for answer in answers)
        pids = self._workers.pids()
        workers = [
            {"worker": i, "pid": pids[i], "running": pids[i] is not None, "answered": answers[i] is not None}
            for i in range(len(answers))
        ]
        failures = [f"worker {i}: {a['store_failure']}" for i, a in enumerate(answers) if a and a.get("store_failure")]
        failed = {"store_failure": "; ".join(failures)} if failures else {}
        return {"healthy": healthy, "actors": actors, "workers": workers, **failed}

    def learning_idle(self, timeout: float) -> bool:
        """Every worker's background jobs (each learns from the turns it answers)."""
        return all(self._workers.ask("learning_idle", timeout))

    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids."""
        return self._workers.pids()

    def stop(self, grace: float) -> None:
        """The workers finish or interrupt their turns within ``grace`` and exit; a turn none of them
        ended (a worker that had to be killed) stays pending for the next start."""
        self._workers.stop(grace)
        for turn in self._inflight.turns():
            turn.sink(
                Error(
                    ErrorCode.SHUTTING_DOWN,
                    "agentd stopped first; the message is kept and answered after restart",
                    turn.message_id,
                )
            )

    # -- internals ----------------------------------------------------------------------------

    def _relayed(self, request_id: str, event: Event) -> None:
        """A worker's event for one of this runtime's turns: to its sink and the listeners."""
        turn = self._inflight.get(request_id)
        if turn is not None:
            turn.sink(event)  # the fan-out: the sink, the listeners, and done with it on Done/Error

    def _restarted(self, index: int) -> None:
        """Worker ``index`` died and was started again: its turns whose message is still pending go
        to the new one; one whose outcome was stored, but never heard of, ends with an error."""
        turns = [t for t in self._inflight.turns() if self._workers.owner(t.channel) == index]
        if not turns:
            return
        try:
            with self._app.store.read() as conn:
                status = self._app.store.messages.statuses(conn, [t.message_id for t in turns])
        except StoreError as exc:  # they stay pending: answered after the next start
            log.error("worker_turns_not_resumed", worker=index, error=exc.message)
            return
        for turn in turns:
            if status.get(turn.message_id) == "pending":
                self._workers.route(turn)
            else:
                turn.sink(
                    Error(
                        ErrorCode.INTERNAL_ERROR,
                        "the worker process answering this message stopped; its outcome is stored "
                        f"(message status: {status.get(turn.message_id, 'unknown')})",
                        turn.message_id,
                    )
                )
        log.info("worker_turns_resumed", worker=index, turns=len(turns))


__all__ = ["WorkerPool"]
