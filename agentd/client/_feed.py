"""What a channel feed does with its stream, blocking or asyncio alike (:class:`FeedState`).

:class:`~agentd.client.Feed` and :class:`~agentd.client.AsyncFeed` differ only in how they
connect, read and wait; what each frame means (its id to resume from, the server's ``retry:``,
the ``open`` event on a new connection), which answers end the feed and which are retried,
and the headers to resume with are decided here, once.
"""

from __future__ import annotations

import httpx
from httpx_sse import ServerSentEvent

from agentd.client import _calls
from agentd.client.backoff import Backoff
from agentd.client.errors import ApiError, DaemonUnreachable
from agentd.client.models import StreamEvent


class FeedState:
    """Where a feed is: the last ``message`` id seen, whether it reconnects, its backoff."""

    def __init__(self, channel: str, last_event_id: str | None, reconnect: bool) -> None:
        self.channel = channel
        #: The id of the last event with one (``message`` events): the next connection resumes after it.
        self.last_event_id = last_event_id
        self._reconnect = reconnect
        self.backoff = Backoff()
        self._opened = False

    def connecting(self) -> dict[str, str]:
        """A connection is about to be opened: the headers that resume the feed where it was."""
        self._opened = False
        return {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}

    def refused(self, error: ApiError) -> None:
        """The daemon answered the connection with an error: raise it unless it is worth another try
        (a 5xx, when reconnecting)."""
        if not self._reconnect or error.status < 500:
            raise error

    def dropped(self, url: str, exc: httpx.TransportError) -> None:
        """The connection failed or broke: raise unless reconnecting."""
        if not self._reconnect:
            raise DaemonUnreachable(url, exc) from exc

    def again(self) -> float | None:
        """After a connection ended: seconds to wait before the next, or ``None``: the feed ends."""
        return self.backoff.next() if self._reconnect else None

    def received(self, sse: ServerSentEvent) -> tuple[StreamEvent | None, StreamEvent | None]:
        """One frame of the stream: (the ``open`` event, on a connection's first frame; the frame's
        event, if it is one), with the resume id and the server's ``retry:`` noted first."""
        if sse.retry is not None:
            self.backoff.floor = sse.retry / 1000
        if sse.id:
            self.last_event_id = sse.id
        opened = None
        if not self._opened:
            self._opened = True
            self.backoff.reset()
            opened = StreamEvent("open", {"channel": self.channel}, self.last_event_id)
        return opened, _calls.to_event(sse)
