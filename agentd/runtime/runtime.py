"""The runtime: the one place outside the actors that talks to them.

``submit`` validates a message, stores it (durable before anything else
happens), and tells the supervisor; the reply arrives as events on the sink.
``chat`` does the same and yields the events. ``stop`` shuts down without
losing anything accepted: replies in flight may finish within a grace period,
then are cut and stored as ``interrupted``; messages not yet started stay
``pending`` and are answered by ``resume_pending`` after the next start.

A turn's lifecycle (accepted → started → answered | failed | interrupted) lives
in its :class:`~agentd.runtime.messages.Draft`: the responder starts and ends it,
shutdown may end it first, and whoever ends it first stores the outcome.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pykka

from agentd._exceptions import ErrorCode, InvalidInput, ShuttingDown, SkillExecutionFailed, StoreError
from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.log import get_logger
from agentd.personas import Persona
from agentd.runtime.actor import PersonaActor
from agentd.runtime.events import Done, Error, Event, MemoryContext
from agentd.runtime.group_commit import MAX_BATCH, GroupCommit
from agentd.runtime.learning import Learning
from agentd.runtime.messages import ActorKey, Dispatch, Draft, Health, Sink, Turn, TurnState, resumed_turn
from agentd.runtime.record import Incoming, TurnWriter
from agentd.runtime.respond import Responder
from agentd.runtime.supervisor import Supervisor
from agentd.runtime.turn import PreparedTurn, TurnPreparer
from agentd.runtime.visibility import VISIBILITIES
from agentd.scopes import DELEGATION_MARK, check_identifier
from agentd.skills import Caller
from agentd.store.messages import Message

if TYPE_CHECKING:
    from agentd.runtime.cluster import Cluster
    from agentd.runtime.workers import Workers

log = get_logger("agentd.runtime")

#: Listeners see every turn's events (the daemon's channel feeds).
Listener = Callable[[Turn, Event], None]


@dataclass(frozen=True)
class Accepted:
    """A stored user message and the request that will answer it."""

    message_id: int
    request_id: str
    persona: str
    channel: str


class Runtime:
    """Supervisor, actors and their collaborators, behind a small synchronous API."""

    def __init__(
        self,
        app: App,
        llm: ChatModel | None = None,
        listeners: tuple[Listener, ...] = (),
        *,
        workers: int = 0,
        owns: Callable[[str], bool] | None = None,
    ) -> None:
        """``workers``: answer turns in that many worker processes (:mod:`agentd.runtime.workers`;
        SQLite only) instead of in this process's actors. ``owns``: the channels whose background
        jobs this runtime catches up with at start (a worker's own; default all)."""
        if llm is None:
            from agentd.llm.chat import LitellmChat

            llm = LitellmChat()
        self._app = app
        self._config = app.config
        self._llm = llm
        self._listeners = list(listeners)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentd-retrieval")
        # The CPU-bound parts of turns take turns ([runtime] turn_slots): under the GIL, fifty
        # actors preparing at once only make each other, and the accept path, wait longer.
        self._slots = threading.BoundedSemaphore(app.config.runtime.slots)
        front = workers > 0 and app.store.backend == "sqlite"
        self._learning = Learning(app, llm, owns)
        if not front:  # with workers, each learns from the turns it answers
            self._listeners.append(self._learning.listener())
        self._preparer = TurnPreparer.for_app(app, self._pool, delegate=self, episodes=self._learning.episodes)
        self._writer = TurnWriter(app.store, app.builder)
        self._accepting = True
        self._inflight: dict[str, Turn] = {}
        self._changed = threading.Condition()
        # Several daemons (PostgreSQL): routing a message of a channel this daemon takes over
        # dispatches every pending message of that channel, so each message is committed and
        # routed on its own (a batch's later messages would be dispatched twice).
        self._intake: GroupCommit[Incoming, Message, _Delivery] = GroupCommit(
            self._writer.accept_many,
            self._dispatch_stored,
            max_batch=1 if app.store.backend == "postgresql" else MAX_BATCH,
            guard=self._serial,
        )
        self._subagents: dict[int, Turn] = {}
        self._workers: Workers | None = None
        self._supervisor: pykka.ActorRef[Any] | None = None
        self._cluster: Cluster | None = None
        if front:
            from agentd.runtime.workers import Workers

            app.store.share_writes()  # the workers write to the same database
            self._workers = Workers(
                app.config, workers, self._relayed, self._worker_restarted, preload=app.turn_modules()
            ).start()
            return
        self._supervisor = Supervisor.start(self._spawn, app.config.runtime, self._unanswerable)
        if app.store.backend == "postgresql":  # several daemons may share it (agentd.runtime.cluster)
            from agentd.runtime.cluster import Cluster

            try:
                self._cluster = Cluster(app.store, app.config.cluster, tuple(app.personas), self).start()
            except BaseException:
                self._supervisor.stop()
                raise
        self._learning.start()

    # -- the public API -------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Also send every event of every turn to ``listener`` (called from actor threads)."""
        self._listeners.append(listener)

    def submit(
        self,
        persona: str,
        channel: str,
        user: str,
        text: str,
        *,
        disable_memory: bool = False,
        sink: Sink | None = None,
        source: str = "chat",
        disable_tools: bool = False,
        at: datetime | None = None,
        visibility: str | None = None,
    ) -> Accepted:
        """Validate and store a user message, then hand it to its actor.

        ``disable_tools``: the persona's skills are not offered to the model for this turn.
        ``at``: when the message was said (a conversation replayed with its times; UTC-aware),
        default now.
        ``visibility``: what the caller says of the channel (``direct``: only this user
        and the persona read it; ``shared``); config's ``[channels.NAME] visibility``
        wins, and the first declaration of a channel stands.
        """
        if not self._accepting:
            raise ShuttingDown("agentd is shutting down and accepts no new messages")
        p = self._app.personas[persona]
        check_identifier("channel", channel)
        check_identifier("user", user)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("message", "must not be empty or whitespace")
        limit = self._config.runtime.max_message_chars
        if len(text) > limit:
            raise InvalidInput(
                "message", f"is {len(text)} characters; the limit is {limit} ([runtime] max_message_chars)"
            )
        if at is not None and at.tzinfo is None:
            raise InvalidInput("at", "must be a timezone-aware time")
        if visibility is not None and visibility not in VISIBILITIES:
            raise InvalidInput("visibility", f"must be one of {', '.join(VISIBILITIES)}")
        declared = self._config.channel_visibility(channel) or visibility
        # Stored together with concurrent submits (group commit), then dispatched in id order:
        # a channel's messages are answered in the order they were stored. Several daemons:
        # no sweep of the pending messages runs between storing and routing (the intake's guard).
        item = self._writer.incoming(
            p,
            channel,
            user,
            text,
            request_id=uuid.uuid4().hex,
            source=source,
            options=_options(disable_memory, disable_tools),
            at=at,
            visibility=declared if DELEGATION_MARK not in channel else None,
        )
        stored = self._intake.submit(item, _Delivery(sink or _discard, disable_memory, disable_tools))
        assert stored.request_id is not None
        return Accepted(stored.id, stored.request_id, p.name, channel)

    def chat(
        self,
        persona: str,
        channel: str,
        user: str,
        text: str,
        *,
        disable_memory: bool = False,
        timeout: float = 300.0,
        disable_tools: bool = False,
        visibility: str | None = None,
    ) -> Iterator[Event]:
        """Submit and yield the turn's events until ``Done`` or ``Error``."""
        events: queue.Queue[Event] = queue.Queue()
        self.submit(
            persona,
            channel,
            user,
            text,
            disable_memory=disable_memory,
            sink=events.put,
            disable_tools=disable_tools,
            visibility=visibility,
        )
        while True:
            try:
                event = events.get(timeout=timeout)
            except queue.Empty:
                yield Error(ErrorCode.REPLY_TIMEOUT, f"no reply within {timeout:g} s")
                return
            yield event
            if isinstance(event, Done | Error):
                return

    def preview(self, persona: str, channel: str, user: str | None, message: str | None) -> PreparedTurn:
        """What ``persona``'s next turn in ``channel`` would be given (the same preparation as a turn)."""
        return self._preparer.prepare(self._app.personas[persona], channel, user, message)

    def resume_pending(self, sink: Sink | None = None) -> int:
        """Answer user messages that were accepted but never answered (e.g. before a crash).

        Several daemons on one PostgreSQL: only those of the channels this daemon owns or
        can take (the others' owners answer theirs).
        """
        if self._cluster is not None:
            resumed = self._cluster.sweep()
            if resumed:
                log.info("resumed_pending", count=resumed)
            return resumed
        with self._app.store.read() as conn:
            pending = self._app.store.messages.with_status(conn, "pending")
        resumed = 0
        for msg in pending:
            if msg.persona is None or msg.persona not in self._app.personas:
                continue
            self._dispatch(resumed_turn(msg, sink or _discard))
            resumed += 1
        if resumed:
            log.info("resumed_pending", count=resumed)
        return resumed

    def health(self, timeout: float = 5.0) -> dict[str, Any]:
        """Every actor's state (asked of the supervisor, or of every worker, with a timeout)."""
        if self._workers is not None:
            return self._workers_health(timeout)
        assert self._supervisor is not None
        answer = self._supervisor.ask(Health(), timeout=timeout)
        assert isinstance(answer, dict)
        if self._cluster is not None:
            answer = {**answer, "cluster": {"daemon": self._cluster.name, "channels": len(self._cluster.owned())}}
        return answer

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no turn is in flight; False if ``timeout`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._inflight, timeout=timeout)

    def learning_idle(self, timeout: float) -> bool:
        """Wait until the background jobs (episodes, extraction) have caught up; False on timeout."""
        if self._workers is not None:
            return all(self._workers.ask("learning_idle", timeout))
        return self._learning.wait_idle(timeout)

    @property
    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids (empty: turns are answered in this process)."""
        return self._workers.pids() if self._workers is not None else []

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight replies finish within ``grace`` seconds, store
        the rest as interrupted, and stop every actor."""
        grace = self._config.daemon.shutdown_grace_seconds if grace is None else grace
        self._accepting = False
        if self._workers is not None:
            self._stop_workers(grace)
            return
        if not self.wait_idle(grace):
            with self._changed:
                turns = list(self._inflight.values())
            # Grace is over. Turns not started must not start now (they stay pending for the
            # next start); running ones are asked to stop and get a moment to store their part.
            for turn in turns:
                turn.draft.cancel.set()
                if turn.draft.state is TurnState.ACCEPTED:
                    self._interrupt(turn)
            self.wait_idle(min(2.0, max(grace, 0.5)))
            with self._changed:
                left = list(self._inflight.values())
            for turn in left:
                self._interrupt(turn)
        assert self._supervisor is not None
        try:
            self._supervisor.stop(timeout=5)
        except pykka.Timeout:
            log.warning("supervisor_stop_timeout")
        self._learning.stop()
        if self._cluster is not None:
            self._cluster.close()  # releases this daemon's channels to the others
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- delegation (the DelegateRunner the delegate skill calls) ---------------------------

    def run_subagent(self, persona: str, task: str, caller: Caller) -> dict[str, Any]:
        """Run ``persona`` on ``task`` in a child channel, inline, with the subagent memory budget."""
        limit = self._config.runtime.delegate_max_depth
        chain = caller.chain or (caller.persona,)
        if len(chain) > limit:
            raise SkillExecutionFailed(f"delegation depth limit ({limit}) reached: {' -> '.join(chain)}")
        target = self._app.personas[persona]
        child = f"{caller.channel}~{persona}"
        stored = self._writer.accept(
            target,
            child,
            caller.persona,
            task,
            request_id=uuid.uuid4().hex,
            source="delegate",
            reply_to=caller.message_id,
        )
        events: list[Event] = []
        assert stored.request_id is not None
        turn = Turn(stored.request_id, persona, child, caller.user or caller.persona, stored.id, task, events.append)
        parent_cancel = self._cancel_of(caller.message_id)
        if parent_cancel is not None:
            turn.draft.cancel = parent_cancel  # shutdown cuts the subagent when it cuts its caller
        with self._changed:
            self._subagents[stored.id] = turn
        try:
            outcome = self._responder(target, child).respond(
                turn,
                chain=(*chain, persona),
                memory_limit=self._config.runtime.subagent_limit,
                memory_budget=self._config.runtime.subagent_token_budget,
            )
        finally:
            with self._changed:
                self._subagents.pop(stored.id, None)
        if not outcome.ok:
            error = next((e for e in events if isinstance(e, Error)), None)
            raise SkillExecutionFailed(
                f"{persona} could not finish the task: {error.message if error else 'unknown error'}"
            )
        recalled = next((e for e in events if isinstance(e, MemoryContext)), None)
        return {
            "persona": persona,
            "channel": child,
            "answer": outcome.text,
            "message_id": outcome.reply_id,
            "memories_used": len(recalled.memories) if recalled else 0,
        }

    # -- the cluster's host (agentd.runtime.cluster.Host) -------------------------------------

    @property
    def accepting(self) -> bool:
        """False once :meth:`stop` began."""
        return self._accepting

    def dispatch(self, turn: Turn) -> None:
        """Send a turn to its local actor (the cluster decided this daemon answers it)."""
        self._dispatch(turn)

    def inflight_messages(self) -> set[int]:
        """The message ids of the turns in flight in this runtime."""
        with self._changed:
            return {t.message_id for t in self._inflight.values()}

    def deliver(self, turn: Turn, event: Event) -> None:
        """Another daemon's event: to this runtime's listeners, as if the turn ran here."""
        for listener in self._listeners:
            try:
                listener(turn, event)
            except Exception:
                log.exception("listener_failed", request_id=turn.request_id)

    # -- internals ----------------------------------------------------------------------------

    def _cancel_of(self, message_id: int | None) -> threading.Event | None:
        """The cancel flag of the turn (or running subagent) answering ``message_id``."""
        with self._changed:
            for turn in (*self._inflight.values(), *self._subagents.values()):
                if turn.message_id == message_id:
                    return turn.draft.cancel
        return None

    def _responder(self, persona: Persona, channel: str) -> Responder:
        return Responder(
            persona,
            channel,
            config=self._config,
            preparer=self._preparer,
            writer=self._writer,
            llm=self._llm,
            slots=self._slots,
        )

    def _spawn(self, key: ActorKey, supervisor: pykka.ActorRef[Any], generation: int) -> pykka.ActorRef[Any]:
        persona = self._app.personas[key[0]]
        return PersonaActor.start(key, self._responder(persona, key[1]), supervisor, generation)

    def _serial(self) -> AbstractContextManager[Any]:
        """Held while a batch of submitted messages is stored and routed (several daemons: no
        sweep of the pending messages runs in between)."""
        return self._cluster.serial if self._cluster is not None else contextlib.nullcontext()

    def _dispatch_stored(self, stored: Message, delivery: _Delivery) -> None:
        """A submitted message is stored: send it to its actor (called in id order)."""
        assert stored.request_id is not None and stored.persona is not None
        turn = Turn(
            stored.request_id,
            stored.persona,
            stored.channel,
            stored.author,
            stored.id,
            stored.content,
            delivery.sink,
            delivery.disable_memory,
            disable_tools=delivery.disable_tools,
        )
        if self._cluster is not None:
            self._cluster.route(turn)  # here, or by the daemon that owns the channel
        else:
            self._dispatch(turn)

    def _dispatch(self, turn: Turn) -> None:
        """Track the turn and send it; its events fan out to the sink and the listeners."""
        tracked = Turn(
            turn.request_id,
            turn.persona,
            turn.channel,
            turn.user,
            turn.message_id,
            turn.text,
            self._fanout(turn),
            turn.disable_memory,
            turn.draft,
            turn.disable_tools,
        )
        with self._changed:
            self._inflight[turn.request_id] = tracked
        if self._workers is not None:
            self._workers.route(tracked)
            return
        assert self._supervisor is not None
        self._supervisor.tell(Dispatch(tracked))

    # -- worker processes (agentd.runtime.workers) ---------------------------------------------

    def _relayed(self, request_id: str, event: Event) -> None:
        """A worker's event for one of this runtime's turns: to its sink and the listeners."""
        with self._changed:
            turn = self._inflight.get(request_id)
        if turn is not None:
            turn.sink(event)  # the fan-out: the sink, the listeners, and done with it on Done/Error

    def _worker_restarted(self, index: int) -> None:
        """Worker ``index`` died and was started again: its turns whose message is still pending go
        to the new one; one whose outcome was stored, but never heard of, ends with an error."""
        assert self._workers is not None
        with self._changed:
            turns = [t for t in self._inflight.values() if self._workers.owner(t.channel) == index]
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

    def _workers_health(self, timeout: float) -> dict[str, Any]:
        assert self._workers is not None
        answers = self._workers.ask("health", timeout)
        actors = [a for answer in answers if answer for a in answer.get("actors", [])]
        healthy = all(answer is not None and answer.get("healthy", True) for answer in answers)
        pids = self._workers.pids()
        workers = [
            {"worker": i, "pid": pids[i], "running": pids[i] is not None, "answered": answers[i] is not None}
            for i in range(len(answers))
        ]
        return {"healthy": healthy, "actors": actors, "workers": workers}

    def _stop_workers(self, grace: float) -> None:
        """Stop: the workers finish or interrupt their turns within ``grace`` and exit; a turn none
        of them ended (a worker that had to be killed) stays pending for the next start."""
        assert self._workers is not None
        self._workers.stop(grace)
        with self._changed:
            left = list(self._inflight.values())
        for turn in left:
            turn.sink(
                Error(
                    ErrorCode.SHUTTING_DOWN,
                    "agentd stopped first; the message is kept and answered after restart",
                    turn.message_id,
                )
            )
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _fanout(self, turn: Turn) -> Sink:
        def emit(event: Event) -> None:
            # The listeners first (the channel's feed, the background jobs' nudge): a caller that
            # has its turn's Done and then waits for the jobs (learning_idle) finds them nudged.
            for listener in self._listeners:
                try:
                    listener(turn, event)
                except Exception:  # a broken sink or listener must not break the turn
                    log.exception("listener_failed", request_id=turn.request_id)
            try:
                turn.sink(event)
            except Exception:
                log.exception("listener_failed", request_id=turn.request_id)
            if self._cluster is not None:
                self._cluster.publish(turn, event)
            if isinstance(event, Done | Error):
                with self._changed:
                    self._inflight.pop(turn.request_id, None)
                    self._changed.notify_all()

        return emit

    def _unanswerable(self, turn: Turn, code: ErrorCode, message: str) -> None:
        """A turn no actor will answer: mark it failed and tell its sink (runs on the supervisor)."""
        if turn.draft.finish(TurnState.FAILED):
            try:
                self._writer.ended(turn.persona, turn.channel, turn.message_id, turn.request_id, TurnState.FAILED, "")
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
            code, why = ErrorCode.INTERRUPTED, "agentd stopped before the reply was complete"
            try:
                reply_id = self._writer.ended(
                    turn.persona,
                    turn.channel,
                    turn.message_id,
                    turn.request_id,
                    TurnState.INTERRUPTED,
                    turn.draft.text(),
                )
            except StoreError as exc:  # the message stays pending: answered after the next start
                log.error("turn_outcome_not_stored", request_id=turn.request_id, store_error=exc.message)
                code, why = ErrorCode.STORE_ERROR, f"{why}, and the store could not be written ({exc.message})"
        else:
            code, why = ErrorCode.SHUTTING_DOWN, "agentd stopped first; the message is kept and answered after restart"
        turn.sink(Error(code, why, turn.message_id, reply_id))


@dataclass(frozen=True)
class _Delivery:
    """How a submitted message's turn is run, once the message is stored."""

    sink: Sink
    disable_memory: bool
    disable_tools: bool


def _discard(_event: Event) -> None:
    pass


def _options(disable_memory: bool, disable_tools: bool) -> dict[str, Any] | None:
    """The per-message options stored with a user message (so a resumed turn keeps them)."""
    options = {"disable_memory": disable_memory, "disable_tools": disable_tools}
    return {k: True for k, v in options.items() if v} or None


__all__ = ["Accepted", "Draft", "Runtime"]
