"""What the client does, written once for the blocking and the asyncio client (sans I/O).

Each call is a *program*: a generator that yields the steps it needs carried out and is sent
back what came of each. :class:`Send` a call (sent back: the response), :class:`Open` a
stream (the response, its body read if it is an error), :class:`Next` frame of the open stream
(the frame; ``None`` when the stream ended), :class:`Wait`, :class:`Emit` an event to the
caller. A step whose connection failed is answered with the :class:`DaemonUnreachable` that
stands for the failure, never raised into the program: what it means (end, retry, resume) is
the program's to decide.

:mod:`agentd.client.sync` and :mod:`agentd.client.aio` only carry the steps out, each with its
own I/O; what is sent, how an answer is read, which failures are retried, after how long,
and how a feed resumes are decided here (and in :mod:`agentd.client._feed`), once.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from httpx_sse import ServerSentEvent

from agentd.client import _calls
from agentd.client.errors import ApiError, DaemonUnreachable, error_from
from agentd.client.models import StreamEvent
from agentd.client.retry import Patience

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """Send one plain request; sent back: its response."""

    call: _calls.Call[Any]


@dataclass(frozen=True)
class Open:
    """Open a stream (closing the one open, if any); sent back: its response, an error's body read."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    json: dict[str, Any] | None = None


@dataclass(frozen=True)
class Next:
    """Read the open stream's next frame; sent back: the frame, or ``None`` when the stream ended."""


@dataclass(frozen=True)
class Wait:
    """Close the open stream, if any, and wait ``seconds`` (a feed's wait ends early when it is closed)."""

    seconds: float


@dataclass(frozen=True)
class Emit:
    """Give ``event`` to the caller (a stream's programs only)."""

    event: StreamEvent


Step = Send | Open | Next | Wait | Emit
#: What a step is answered with.
Reply = httpx.Response | ServerSentEvent | DaemonUnreachable | None
#: A call's program, ending with its result.
Program = Generator[Step, Reply, T]

NEXT = Next()


def unreachable(url: str, exc: httpx.TransportError) -> DaemonUnreachable:
    """The :class:`DaemonUnreachable` that stands for ``exc`` (its cause: what failed)."""
    error = DaemonUnreachable(url, exc)
    error.__cause__ = exc
    return error


def answered(reply: Reply) -> httpx.Response:
    """The response a :class:`Send` or :class:`Open` was answered with; raise if it failed."""
    if isinstance(reply, DaemonUnreachable):
        raise reply
    if not isinstance(reply, httpx.Response):  # a driver's bug, not the daemon's
        raise TypeError(f"expected a response, got {reply!r}")
    return reply


def frame_of(reply: Reply) -> ServerSentEvent | None:
    """The frame a :class:`Next` was answered with (``None``: the stream ended); raise if the
    connection broke."""
    if isinstance(reply, DaemonUnreachable):
        raise reply
    if reply is not None and not isinstance(reply, ServerSentEvent):  # a driver's bug
        raise TypeError(f"expected a frame, got {reply!r}")
    return reply


def calling(call: _calls.Call[T]) -> Program[T]:
    """One request, read into its result; an error answer raises its :class:`ApiError`."""
    response = answered((yield Send(call)))
    if response.status_code not in call.ok:
        raise error_from(response, response.content)
    return call.parse(response.json())


def posting(call: _calls.Call[T], patience: Patience) -> Program[T]:
    """:func:`calling`, tried again while ``patience`` says a failure is worth another try
    (a ``429``, after its ``Retry-After``; a connection refused): never what may have been stored."""
    while True:
        try:
            return (yield from calling(call))
        except (ApiError, DaemonUnreachable) as exc:
            wait = patience.wait_after(exc)
            if wait is None:
                raise
        yield Wait(wait)


def chatting(body: dict[str, Any]) -> Program[None]:
    """``POST /v1/chat``: emit the turn's events until the stream ends."""
    response = answered((yield Open("POST", "/v1/chat", json=body)))
    if response.status_code != 200:
        raise error_from(response, response.content)
    while (frame := frame_of((yield NEXT))) is not None:
        event = _calls.to_event(frame)
        if event is not None:
            yield Emit(event)
