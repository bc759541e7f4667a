"""What goes over a worker process's pipe, between the daemon (:mod:`agentd.runtime.scaleout.workers`) and
the worker (:mod:`agentd.runtime.scaleout.worker`), and which worker answers a channel."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from agentd.access.scopes import root_channel
from agentd.runtime.events import Event
from agentd.runtime.messages import NO_ROOM, RoomTurn

#: Seconds the daemon waits for a worker's answer to a question (health, idle).
ASK_TIMEOUT = 10.0
#: Events sent per message on a worker's pipe, at most.
BATCH = 512


def shard_of(channel: str, count: int) -> int:
    """The worker (``0 .. count-1``) that answers ``channel``: its root channel's crc32 modulo ``count``."""
    return zlib.crc32(root_channel(channel).encode()) % count


# -- what goes over a worker's pipe ------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """Daemon → worker: answer this stored user message."""

    request_id: str
    persona: str
    channel: str
    user: str
    message_id: int
    text: str
    disable_memory: bool
    disable_tools: bool
    #: The W3C ``traceparent`` the worker's spans of this turn join ("" when not traced).
    traceparent: str = ""
    #: Its place in a room (who answers after it, its chain).
    room: RoomTurn = NO_ROOM


@dataclass(frozen=True)
class Ask:
    """Daemon → worker: a question (``health``, ``learning_idle``) answered with :class:`Answered`."""

    ident: int
    what: str
    timeout: float = ASK_TIMEOUT


@dataclass(frozen=True)
class Stop:
    """Daemon → worker: stop the runtime within ``grace`` seconds, then exit."""

    grace: float


@dataclass(frozen=True)
class Events:
    """Worker → daemon: ``(request_id, event)`` pairs, in the order the turns emitted them."""

    items: list[tuple[str, Event]]


@dataclass(frozen=True)
class Answered:
    """Worker → daemon: the answer to :class:`Ask` ``ident``."""

    ident: int
    value: Any


@dataclass(frozen=True)
class Stopped:
    """Worker → daemon: the runtime stopped; the worker exits."""
