"""A channel feed, blocking or asyncio alike: where it is (:class:`FeedState`) and what it does
(:func:`following`, a program of :mod:`agentd.client._program`).

:class:`~agentd.client.Feed` and :class:`~agentd.client.AsyncFeed` only carry its steps out:
what each frame means (its id to resume from, the server's ``retry:``, the ``open`` event on a
new connection), which answers end the feed and which are retried, and the headers to resume
with are decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from httpx_sse import ServerSentEvent

from agentd.client import _calls
from agentd.client._program import NEXT, Emit, Open, Program, Wait, answered, frame_of
from agentd.client.backoff import Backoff
from agentd.client.errors import ApiError, DaemonUnreachable, error_from
from agentd.client.models import StreamEvent


class Flag(Protocol):
    """What closes a feed: a :class:`threading.Event` (blocking) or an :class:`asyncio.Event`."""

    def is_set(self) -> bool:
        """True once set."""
        ...

    def set(self) -> None:
        """Set it."""
        ...


class FeedState:
    """Where a feed is: the last ``message`` id seen, whether it reconnects, its backoff, and
    whether it was closed (``stop``: the flag that says so)."""

    def __init__(self, channel: str, last_event_id: str | None, reconnect: bool, stop: Flag) -> None:
        self.channel = channel
        #: The id of the last event with one (``message`` events): the next connection resumes after it.
        self.last_event_id = last_event_id
        self._reconnect = reconnect
        self.backoff = Backoff()
        self._opened = False
        self._stop = stop

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop: at once when called between two events (in the loop's body), else at the next event
        or wait (an open connection ends with its next read)."""
        self._stop.set()

    def connecting(self) -> dict[str, str]:
        """A connection is about to be opened: the headers that resume the feed where it was."""
        self._opened = False
        return {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}

    def refused(self, error: ApiError) -> None:
        """The daemon answered the connection with an error: raise it unless it is worth another try
        (a 5xx, when reconnecting)."""
        if not self._reconnect or error.status < 500:
            raise error

    def dropped(self, error: DaemonUnreachable) -> None:
        """The connection failed or broke: raise unless reconnecting."""
        if not self._reconnect:
            raise error

    def again(self) -> float | None:
        """After a connection ended: seconds to wait before the next, or ``None``: the feed ends."""
        return self.backoff.next() if self._reconnect else None

    def received(self, sse: ServerSentEvent) -> Iterator[StreamEvent]:
        """The events of one frame of the stream: ``open`` first on a connection's first frame, then
        the frame's own, if it is one; the resume id and the server's ``retry:`` are noted first."""
        if sse.retry is not None:
            self.backoff.floor = sse.retry / 1000
        if sse.id:
            self.last_event_id = sse.id
        if not self._opened:
            self._opened = True
            self.backoff.reset()
            yield StreamEvent("open", {"channel": self.channel}, self.last_event_id)
        event = _calls.to_event(sse)
        if event is not None:
            yield event


def _closed(feed: FeedState) -> bool:
    # A call, not the attribute: another thread (or task) closes the feed while the program waits.
    return feed.closed


def following(feed: FeedState) -> Program[None]:
    """Follow ``feed``'s channel until it is closed, or its stream ends and it does not reconnect."""
    path = _calls.channel_path(feed.channel, "events")
    while not _closed(feed):
        try:
            response = answered((yield Open("GET", path, feed.connecting())))
            if response.status_code != 200:
                feed.refused(error_from(response, response.content))
            else:
                while (frame := frame_of((yield NEXT))) is not None:
                    for event in feed.received(frame):
                        yield Emit(event)
                        if _closed(feed):  # closed while the event was handled
                            return
        except DaemonUnreachable as exc:
            feed.dropped(exc)
        wait = feed.again()
        if wait is None:
            return
        yield Wait(wait)
