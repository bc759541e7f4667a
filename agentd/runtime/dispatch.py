"""The dispatcher: the one part of a runtime that differs with the way turns are run.

The intake (:mod:`agentd.runtime.intake`) validates and stores messages and tracks their
turns; it hands each stored turn to one :class:`Dispatcher`, chosen once at start-up
(:class:`agentd.runtime.runtime.Runtime`):

* :class:`~agentd.runtime.actors.local.LocalActors`: a supervisor and one actor per (persona,
  channel) in this process;
* :class:`~agentd.runtime.scaleout.pool.WorkerPool`: worker processes, each running local actors
  (``[runtime] workers``; SQLite);
* :class:`~agentd.runtime.scaleout.cluster.ClusterRouter`: local actors for the channels this daemon
  owns among several daemons sharing one PostgreSQL store; the others' owners answer theirs.

A dispatcher is built from the runtime's :class:`Parts`. Dropping a way of running is
deleting its module and its line in the choice.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.memory.learning import Learning
from agentd.runtime.inflight import InFlight
from agentd.runtime.messages import Sink, Turn, resumed_turn
from agentd.runtime.pipeline.runner import TurnRunner


@dataclass(frozen=True)
class Parts:
    """What a runtime is made of, whatever runs its turns."""

    app: App
    llm: ChatModel
    #: Prepares, answers and stores turns in this process.
    runner: TurnRunner
    #: The turns in flight here and the fan-out of their events.
    inflight: InFlight
    #: The background jobs (episodes, extraction) of the turns answered here.
    learning: Learning
    #: Where retrieval runs.
    pool: ThreadPoolExecutor


class Dispatcher(Protocol):
    """Routes stored turns to what answers them, and reports on it."""

    #: How many submitted messages are stored in one transaction and routed together, at most.
    batch: int

    def serial(self) -> AbstractContextManager[Any]:
        """Held while a batch of submitted messages is stored and routed."""
        ...

    def route(self, turn: Turn) -> None:
        """Have a stored turn answered (its events reach ``turn.sink``)."""
        ...

    def resume_pending(self, sink: Sink) -> int:
        """Answer the stored messages accepted but never answered; how many."""
        ...

    def health(self, timeout: float) -> dict[str, Any]:
        """Every actor's state, asked with a timeout."""
        ...

    def learning_idle(self, timeout: float) -> bool:
        """Wait until the background jobs have caught up; False on timeout."""
        ...

    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids (empty: turns are answered in this process)."""
        ...

    def stop(self, grace: float) -> None:
        """Let turns in flight finish within ``grace`` seconds, end the rest, stop everything."""
        ...


#: Builds a dispatcher from a runtime's parts.
DispatcherFactory = Callable[[Parts], Dispatcher]


def pending_turns(app: App, sink: Sink) -> list[Turn]:
    """The turns of the stored user messages still pending (accepted, never answered), oldest first."""
    with app.store.read() as conn:
        pending = app.store.messages.with_status(conn, "pending")
    return [resumed_turn(msg, sink) for msg in pending if msg.persona is not None and msg.persona in app.personas]


def resume_pending(app: App, sink: Sink, route: Callable[[Turn], None]) -> int:
    """Route (with ``route``, a dispatcher's) every pending message of ``app``'s store, oldest first;
    how many: what :meth:`Dispatcher.resume_pending` does, for every dispatcher."""
    turns = pending_turns(app, sink)
    for turn in turns:
        route(turn)
    return len(turns)


__all__ = ["Dispatcher", "DispatcherFactory", "Parts", "pending_turns", "resume_pending"]
