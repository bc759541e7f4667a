"""Messages between the runtime, the supervisor and the persona actors (frozen dataclasses)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from agentd.runtime.events import Event
from agentd.store.messages import Message

#: Receives a turn's events, in order, from the actor's thread.
Sink = Callable[[Event], None]
#: (persona, channel): the key of one actor.
ActorKey = tuple[str, str]


class TurnState(StrEnum):
    """Where a turn is in its life: accepted → started → answered | failed | interrupted.

    The stored user message's status follows it (``pending`` until the turn ends).
    A turn still ``accepted`` when the daemon starts draining never starts
    (:meth:`Draft.withhold`); one ``interrupted`` (only shutdown interrupts a turn)
    keeps its partial reply but leaves its message ``pending``. Either way the
    message is answered after the next start.
    """

    ACCEPTED = "accepted"
    STARTED = "started"
    ANSWERED = "answered"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    #: Paused: a tool call waits for an owner's approval (or the turn waits behind one).
    AWAITING_APPROVAL = "awaiting_approval"


class Draft:
    """One turn's lifecycle and its reply as it streams, so it can be stored if the turn is cut short.

    Exactly one party ends a turn: the responder when it finishes, or the runtime
    when shutdown's grace period runs out (:meth:`finish` decides: the first call wins).
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._lock = threading.Lock()
        self._state = TurnState.ACCEPTED
        #: Set by the runtime to ask the responder to stop (or never start).
        self.cancel = threading.Event()

    @property
    def state(self) -> TurnState:
        """The turn's state now."""
        with self._lock:
            return self._state

    def start(self) -> bool:
        """accepted → started; False when the turn was cancelled or ended before it could start."""
        with self._lock:
            if self._state is not TurnState.ACCEPTED or self.cancel.is_set():
                return False
            self._state = TurnState.STARTED
            return True

    def withhold(self) -> bool:
        """accepted → interrupted, before it started (a draining daemon starts no new turn); False
        when the turn started or ended already."""
        with self._lock:
            if self._state is not TurnState.ACCEPTED:
                return False
            self._state = TurnState.INTERRUPTED
            return True

    def finish(self, state: TurnState) -> bool:
        """End the turn in ``state``; True for the first caller only (that caller stores the outcome)."""
        with self._lock:
            if self._state not in (TurnState.ACCEPTED, TurnState.STARTED):
                return False
            self._state = state
            return True

    def append(self, text: str) -> None:
        """Add streamed text."""
        with self._lock:
            self._parts.append(text)

    def text(self) -> str:
        """The text so far."""
        with self._lock:
            return "".join(self._parts)


@dataclass(frozen=True)
class RoomTurn:
    """What a turn in a room carries beyond its message (stored in the message's options, so a
    resumed turn has it too): who answers the same message after it, and where it stands in a
    persona-to-persona chain."""

    #: The personas that answer the same message after this one, in order (decided at intake).
    queue: tuple[str, ...] = ()
    #: Persona-to-persona replies in the chain before this turn's reply (0: a person's message).
    hop: int = 0
    #: Who said the text when it is not the turn's user (a persona calling on another).
    speaker: str | None = None
    #: The stored message whose text this turn answers, when it is not the turn's own message
    #: (left out of the transcript: it is the prompt's current message).
    source: int | None = None

    def as_options(self) -> dict[str, object]:
        """The message options that store it (nothing for a plain turn)."""
        found: dict[str, object] = {}
        if self.queue:
            found["queue"] = list(self.queue)
        if self.hop:
            found["hop"] = self.hop
        if self.source is not None:
            found["source"] = self.source
        return found


#: A turn outside any room.
NO_ROOM = RoomTurn()


@dataclass(frozen=True)
class Turn:
    """One user message to answer; the message is already stored as ``message_id``."""

    request_id: str
    persona: str
    channel: str
    user: str
    message_id: int
    text: str
    sink: Sink
    disable_memory: bool = False
    draft: Draft = field(default_factory=Draft, compare=False)
    #: The persona's tools (skills) are not offered to the model for this turn.
    disable_tools: bool = False
    #: The W3C ``traceparent`` of the request that brought the message ("" when not traced):
    #: the turn's spans join that trace (agentd.observe.tracing).
    traceparent: str = ""
    #: Its place in a room (who answers after it, its chain).
    room: RoomTurn = NO_ROOM

    @property
    def key(self) -> ActorKey:
        """The actor that answers this turn."""
        return (self.persona, self.channel)


def resumed_turn(msg: Message, sink: Sink) -> Turn:
    """The turn that answers a stored user message still ``pending`` (with its stored options)."""
    assert msg.persona is not None
    return Turn(
        msg.request_id or uuid.uuid4().hex,
        msg.persona,
        msg.channel,
        msg.asker,
        msg.id,
        msg.content,
        sink,
        bool(msg.options.get("disable_memory")),
        disable_tools=bool(msg.options.get("disable_tools")),
        room=room_of_message(msg),
    )


def room_of_message(msg: Message) -> RoomTurn:
    """The :class:`RoomTurn` a stored message's options describe (a trigger a persona's reply stored
    says who spoke: its author; the person the chain answers is its :data:`~agentd.store.messages.FOR_USER` option)."""
    o = msg.options
    if not ("queue" in o or "hop" in o or "source" in o):
        return NO_ROOM
    source = o.get("source")
    return RoomTurn(
        tuple(str(p) for p in o.get("queue", ())),
        int(o.get("hop", 0)),
        msg.author if msg.role == "trigger" and msg.asker != msg.author else None,
        int(source) if source is not None else None,
    )


@dataclass(frozen=True)
class Dispatch:
    """Runtime → supervisor: route a turn to its actor."""

    turn: Turn


@dataclass(frozen=True)
class TurnFinished:
    """Actor → supervisor: a turn is done (answered or ended with an Error event)."""

    key: ActorKey
    request_id: str


@dataclass(frozen=True)
class ActorCrashed:
    """Actor → supervisor: a bug escaped the handler while answering ``request_id``."""

    key: ActorKey
    request_id: str | None
    error: str
    generation: int


@dataclass(frozen=True)
class Respawn:
    """Timer → supervisor: the backoff is over; start the actor again."""

    key: ActorKey


@dataclass(frozen=True)
class IdleCheck:
    """Timer → supervisor: stop actors idle for longer than the configured time."""


@dataclass(frozen=True)
class HealthCheck:
    """Edge → supervisor (ask): the state of every actor."""
