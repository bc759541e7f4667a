"""The intake: the one place outside the actors that talks to them.

``submit`` validates a message, stores it (durable before anything else
happens), and hands its turn to the dispatcher; the reply arrives as events on
the sink. ``chat`` does the same and yields the events. ``stop`` shuts down
without losing anything accepted: it starts no new turn, replies in flight may
finish within a grace period, then are cut (the partial reply stored as
``interrupted``); the messages of cut turns and of turns not started stay
``pending`` and are answered by ``resume_pending`` after the next start.

The stages of a message, in order (a stage added later, such as admission
control or per-stage metrics, goes where its comment stands in :meth:`Intake.submit`):

1. validate (:meth:`Intake.submit`);
2. admit: past this daemon's, or the channel's, bound on messages accepted and not yet
   answered, :class:`~agentd.Overloaded` (429 + ``Retry-After``) before anything is stored
   (:mod:`agentd.runtime.admission`);
3. group-commit: stored with concurrent submits in one transaction
   (:class:`~agentd.runtime.group_commit.GroupCommit`), then routed in id order;
4. dispatch: the turn goes to the :class:`~agentd.runtime.dispatch.Dispatcher`
   chosen at start-up, which tracks it in :class:`~agentd.runtime.inflight.InFlight`
   while it runs here;
5. fan out: each event to the listeners, the sink, and the cluster's other daemons.

A schedule's firing (:mod:`agentd.runtime.scheduler`) takes the same stages through
:meth:`Intake.fire`: admitted, then stored in the transaction that claims the schedule, then
routed like a submitted message.

A turn's lifecycle (accepted → started → answered | failed | interrupted) lives
in its :class:`~agentd.runtime.messages.Draft`: the responder starts and ends it,
shutdown may end it first, and whoever ends it first stores the outcome.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd._exceptions import ErrorCode, InvalidInput, Overloaded, ShuttingDown, StoreError
from agentd.access.scopes import DELEGATION_MARK, check_identifier
from agentd.access.visibility import VISIBILITIES
from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.memory.learning import Learning
from agentd.observe import metrics, tracing
from agentd.observe.log import get_logger
from agentd.runtime.acting import ActingCaller, check_acting
from agentd.runtime.admission import Admission, Ticket
from agentd.runtime.approvals import ApprovalDesk
from agentd.runtime.dispatch import DispatcherFactory, Parts
from agentd.runtime.events import Done, Error, Event
from agentd.runtime.group_commit import GroupCommit
from agentd.runtime.inflight import InFlight, Listener
from agentd.runtime.messages import Sink, Turn, resumed_turn, room_of_message
from agentd.runtime.pipeline.record import Incoming
from agentd.runtime.pipeline.runner import TurnRunner
from agentd.runtime.pipeline.turn import PreparedTurn
from agentd.runtime.rooms import answerers, room_of
from agentd.store.messages import FOR_USER, Message

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = get_logger("agentd.runtime")


@dataclass(frozen=True)
class Accepted:
    """A stored user message and the request that will answer it."""

    message_id: int
    request_id: str
    #: The persona that answers it ("": nobody was asked to, in a room with ``require_mention``).
    persona: str
    channel: str
    #: In a room, the personas that answer it after ``persona``, in order.
    also: tuple[str, ...] = ()


def until_done(events: queue.Queue[Event], timeout: float) -> Iterator[Event]:
    """A turn's events from ``events`` (its sink's queue) up to its ``Done`` or ``Error``; a
    ``reply_timeout`` error when none comes within ``timeout`` seconds of the last."""
    while True:
        try:
            event = events.get(timeout=timeout)
        except queue.Empty:
            yield Error(ErrorCode.REPLY_TIMEOUT, f"no reply within {timeout:g} s")
            return
        yield event
        if isinstance(event, Done | Error):
            return


class Intake:
    """Accepts messages, stores them, and hands their turns to one dispatcher; a small synchronous API."""

    def __init__(
        self,
        app: App,
        dispatcher: DispatcherFactory,
        llm: ChatModel | None = None,
        listeners: tuple[Listener, ...] = (),
        *,
        owns: Callable[[str], bool] | None = None,
        passes_on: bool = True,
    ) -> None:
        """``dispatcher``: builds what answers the turns from this runtime's parts. ``owns``: the
        channels whose background jobs this runtime catches up with at start (a worker's own;
        default all). ``passes_on``: route the triggers a room's replies store (false in a worker
        process: the daemon routes them)."""
        if llm is None:
            from agentd.llm.chat import LitellmChat

            llm = LitellmChat()
        self._app = app
        self._config = app.config
        metrics.enable(app.config.telemetry.metrics)  # [telemetry] metrics: count from here on
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentd-retrieval")
        self._inflight = InFlight(listeners)
        self._admission = Admission(app.config.daemon)
        learning = Learning(
            app.config, app.store, app.memory, app.personas, llm, embeds=app.embedder is not None, owns=owns
        )
        self._runner = TurnRunner(app, llm, self._pool, self._inflight, learning.episodes)
        self._accepting = True
        self._dispatcher = dispatcher(Parts(app, llm, self._runner, self._inflight, learning, self._pool))
        #: Moves paused turns on once decided (started by the daemon: :meth:`start_approvals`).
        self._desk = ApprovalDesk(app, self.dispatch, _discard)
        self._commit: GroupCommit[Incoming, Message, _Delivery] = GroupCommit(
            self._runner.writer.accept_many,
            self._route_stored,
            max_batch=self._dispatcher.batch,
            guard=self._dispatcher.serial,
        )
        if passes_on:
            self._inflight.add_listener(self._pass_on)

    # -- the public API -------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Also send every event of every turn to ``listener`` (called from actor threads)."""
        self._inflight.add_listener(listener)

    def submit(
        self,
        persona: str | None,
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
        caller: ActingCaller | None = None,
    ) -> Accepted:
        """Validate and store a user message, then hand it to its actor.

        ``persona``: who answers; ``None`` in a room (``[channels.NAME]`` binding several personas):
        the room decides, now, and the decision is stored with the message (:mod:`agentd.runtime.rooms`).
        ``disable_tools``: the persona's skills are not offered to the model for this turn.
        ``at``: when the message was said (a conversation replayed with its times; UTC-aware),
        default now.
        ``visibility``: what the caller says of the channel (``direct``: only this user
        and the persona read it; ``shared``); config's ``[channels.NAME] visibility``
        wins, and the first declaration of a channel stands.
        ``caller``: the key that sends it (:func:`~agentd.runtime.acting.check_acting`: it must
        own ``user``); ``None``: the operator, in process.
        """
        # 1. validate
        if not self._accepting:
            metrics.turn_ended(persona if persona is not None and persona in self._app.personas else "", "refused")
            raise ShuttingDown("agentd is shutting down and accepts no new messages")
        check_identifier("channel", channel)
        check_identifier("user", user)
        check_acting(caller, user)  # before anything is stored or recalled as ``user``
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
        chosen = [self._app.personas[persona].name] if persona is not None else self._answerers(channel, text)
        declared = self._config.channel_visibility(channel) or visibility
        item = _Item(channel, user, text, source, _options(disable_memory, disable_tools, chosen[1:]), at, declared)
        return self._store(chosen, item, _Delivery(sink or _discard, disable_memory, disable_tools))

    def _answerers(self, channel: str, text: str) -> list[str]:
        """Who answers ``text`` in the room ``channel``, in order (none: nobody is asked to)."""
        entry = room_of(self._config, channel)
        if entry is None:
            raise InvalidInput("persona", f"channel {channel!r} is not a room (several personas): name a persona")
        last = None
        if entry.answer == "rotate":
            with self._app.store.read() as conn:
                last = self._app.store.messages.last_answerer(conn, channel)
        return answerers(entry, text, last)

    def _store(self, chosen: list[str], item: _Item, delivery: _Delivery) -> Accepted:
        """2. admit and 3. store the message (answered by ``chosen``, in order; none: ``noted``)."""
        channel = item.channel
        p = self._app.personas[chosen[0] if chosen else self._config.channels[channel].personas[0]]
        # 2. admit: a ticket held until the turn's Done/Error reaches its sink; Overloaded past a bound.
        ticket = None
        if chosen:
            try:
                ticket = self._admission.admit(p.name, channel)
            except Overloaded:
                metrics.turn_ended(p.name, "refused")  # 429: nothing stored, the caller retries
                raise
        # 3. group-commit: stored together with concurrent submits, then routed in id order: a
        # channel's messages are answered in the order they were stored. Several daemons: no
        # sweep of the pending messages runs between storing and routing (the dispatcher's serial).
        try:
            incoming = self._runner.writer.incoming(
                p,
                channel,
                item.user,
                item.text,
                request_id=uuid.uuid4().hex,
                source=item.source,
                options=item.options,
                at=item.at,
                visibility=item.visibility if DELEGATION_MARK not in channel else None,
                noted=not chosen,
            )
            if ticket is not None:
                delivery = replace(delivery, sink=self._admission.watch(ticket, delivery.sink))
            delivery = replace(delivery, traceparent=tracing.inject())
            with tracing.span("store user message"):
                stored = self._commit.submit(incoming, delivery)
        except BaseException:
            if ticket is not None:
                self._admission.release(ticket, answered=False)  # nothing was stored
            raise
        assert stored.request_id is not None
        return Accepted(stored.id, stored.request_id, chosen[0] if chosen else "", channel, tuple(chosen[1:]))

    def fire(self, claim: Claim, then: Callable[[Connection, Sequence[Message]], None] | None = None) -> list[Message]:
        """Store trigger messages and the writes that decide them in one transaction, then answer them.

        ``claim(conn, admit)`` runs in the write transaction: it makes its own writes (a schedule
        claimed and moved on) and returns the messages to store, each with the ticket ``admit``
        gave it (``admit(persona, channel)``: a ticket, or ``None`` when admission control refuses:
        that one waits, nothing of it is written). Either all of it is stored or none of it, so a
        firing happens exactly once; the messages then reach their actors like submitted ones.
        ``then(conn, stored)``: more writes in the same transaction, once the messages have ids.
        """
        tickets: list[Ticket] = []

        def admit(persona: str, channel: str) -> Ticket | None:
            try:
                ticket = self._admission.admit(persona, channel, share=FIRING_SHARE)
            except Overloaded:
                return None
            tickets.append(ticket)
            return ticket

        kept: set[int] = set()
        try:
            with self._dispatcher.serial():  # no sweep of pending messages between storing and routing
                with self._app.store.write() as conn:
                    claimed = claim(conn, admit)
                    stored = self._runner.writer.accept_in(conn, [item for item, _ in claimed])
                    if then is not None:
                        then(conn, stored)
                kept = {t.number for _, t in claimed}  # committed: these tickets go with their turns
                for msg, (_, ticket) in zip(stored, claimed, strict=True):
                    self._route_stored(msg, _Delivery(self._admission.watch(ticket, _discard), False, False))
        finally:
            for ticket in tickets:
                if ticket.number not in kept:
                    self._admission.release(ticket, answered=False)
        return stored

    def trigger(self, persona: str, channel: str, author: str, text: str, *, for_user: str | None) -> Incoming:
        """A trigger message to store with :meth:`fire` (``source`` ``schedule``), its tokens counted."""
        return self._runner.writer.incoming(
            self._app.personas[persona],
            channel,
            author,
            text,
            request_id=uuid.uuid4().hex,
            source="schedule",
            options={FOR_USER: for_user} if for_user else None,
        )

    def check_room(self, persona: str, channel: str) -> None:
        """:class:`~agentd.Overloaded` if a message to ``persona`` in ``channel`` would be refused now
        (for a caller that stores something of its own before :meth:`submit`)."""
        self._admission.check(self._app.personas[persona].name, channel)

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
        return until_done(events, timeout)

    def preview(self, persona: str, channel: str, user: str | None, message: str | None) -> PreparedTurn:
        """What ``persona``'s next turn in ``channel`` would be given (the same preparation as a turn)."""
        return self._runner.preparer.prepare(self._app.personas[persona], channel, user, message)

    def resume_pending(self, sink: Sink | None = None) -> int:
        """Answer user messages that were accepted but never answered (e.g. before a crash).

        Several daemons on one PostgreSQL: only those of the channels this daemon owns or
        can take (the others' owners answer theirs).
        """
        resumed = self._dispatcher.resume_pending(sink or _discard)
        if resumed:
            log.info("resumed_pending", count=resumed)
        return resumed

    def start_approvals(self) -> None:
        """Start the approvals desk (:mod:`agentd.runtime.approvals`): decided approvals are
        re-enqueued, undecided ones expire, and held messages are released. The daemon starts it
        after :meth:`resume_pending`."""
        self._desk.start()

    def approval_decided(self) -> None:
        """An approval was decided in this process: move its turn on now, not at the next poll."""
        self._desk.nudge()

    def health(self, timeout: float = 5.0) -> dict[str, Any]:
        """Every actor's state (asked of the supervisor, or of every worker, with a timeout), and
        admission control's bounds."""
        return {**self._dispatcher.health(timeout), "admission": asdict(self._admission.bounds())}

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no turn is in flight; False if ``timeout`` passed first."""
        return self._inflight.wait_idle(timeout)

    def learning_idle(self, timeout: float) -> bool:
        """Wait until the background jobs (episodes, extraction) have caught up; False on timeout."""
        return self._dispatcher.learning_idle(timeout)

    @property
    def pending(self) -> int:
        """User messages handed to be answered here and not answered yet (``agentd_pending_messages``)."""
        return len(self._inflight.turns())

    @property
    def app(self) -> App:
        """The parts this runtime runs on."""
        return self._app

    @property
    def accepting(self) -> bool:
        """False once :meth:`stop` began."""
        return self._accepting

    @property
    def worker_pids(self) -> list[int | None]:
        """The worker processes' ids (empty: turns are answered in this process)."""
        return self._dispatcher.worker_pids()

    def dispatch(self, turn: Turn) -> None:
        """Answer an already stored turn (a worker process is given its turns so)."""
        self._dispatcher.route(turn)

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight replies finish within ``grace`` seconds, store
        the rest as interrupted, and stop every actor."""
        grace = self._config.daemon.shutdown_grace_seconds if grace is None else grace
        self._accepting = False
        self._desk.stop()
        self._dispatcher.stop(grace)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals ----------------------------------------------------------------------------

    def _route_stored(self, stored: Message, delivery: _Delivery) -> None:
        """A submitted message is stored: 4. dispatch its turn (called in id order)."""
        assert stored.request_id is not None
        if stored.persona is None:
            return  # noted: nobody is asked to answer it
        turn = Turn(
            stored.request_id,
            stored.persona,
            stored.channel,
            stored.asker,
            stored.id,
            stored.content,
            delivery.sink,
            delivery.disable_memory,
            disable_tools=delivery.disable_tools,
            traceparent=delivery.traceparent,
            room=room_of_message(stored),
        )
        self._dispatcher.route(turn)

    def _pass_on(self, turn: Turn, event: Event) -> None:
        """A listener: a reply in a room stored triggers (the next persona to answer, the personas it
        called on) with it; they go to the dispatcher as any stored message does. Only for turns
        tracked here (another daemon's events pass through the listeners too), and not in a worker
        process (the daemon that sent it the turn routes them)."""
        if not isinstance(event, Done | Error) or not event.triggered or self._inflight.get(turn.request_id) is None:
            return
        try:
            with self._app.store.read() as conn:
                found = [self._app.store.messages.get(conn, t.message_id) for t in event.triggered]
        except StoreError as exc:  # they stay pending: answered after the next start (or a sweep)
            log.error("room_triggers_not_routed", error=exc.message)
            return
        with self._dispatcher.serial():
            for msg in found:
                if msg is not None and msg.status == "pending" and msg.persona in self._app.personas:
                    # Counted by admission control like any accepted message (stored with the reply,
                    # so never refused): a busy chain makes people's posts wait, as a backlog does.
                    ticket = self._admission.hold(str(msg.persona), msg.channel)
                    self._dispatcher.route(resumed_turn(msg, self._admission.watch(ticket, _discard)))


@dataclass(frozen=True)
class _Item:
    """A validated message, before it is stored."""

    channel: str
    user: str
    text: str
    source: str
    options: dict[str, Any] | None
    at: datetime | None
    visibility: str | None


#: The part of the daemon's admission bound firings may hold: people's messages keep the rest.
FIRING_SHARE = 0.5
#: Run in :meth:`Intake.fire`'s transaction: its own writes, and the messages to store with their tickets.
Claim = Callable[["Connection", Callable[[str, str], Ticket | None]], Sequence[tuple[Incoming, Ticket]]]


@dataclass(frozen=True)
class _Delivery:
    """How a submitted message's turn is run, once the message is stored."""

    sink: Sink
    disable_memory: bool
    disable_tools: bool
    #: The submitting request's span (the group commit may route the turn from another thread).
    traceparent: str = ""


def _discard(_event: Event) -> None:
    pass


def _options(disable_memory: bool, disable_tools: bool, queue: list[str]) -> dict[str, Any] | None:
    """The per-message options stored with a user message (so a resumed turn keeps them); in a
    room, ``queue``: who answers it after the first persona."""
    options: dict[str, Any] = {"disable_memory": disable_memory, "disable_tools": disable_tools}
    options = {k: True for k, v in options.items() if v}
    if queue:
        options["queue"] = queue
    return options or None


__all__ = ["FIRING_SHARE", "Accepted", "Claim", "Intake", "until_done"]
