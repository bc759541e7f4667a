"""Channel feeds: what ``GET /v1/channels/{channel}/events`` streams.

Two kinds of events go out:

* ``message`` — a stored user message or reply, with ``id:`` = its message id.
  These are read from the store in id order (the store assigns ids in commit
  order), so a client that reconnects with ``Last-Event-ID: N`` gets every
  message after N exactly once, across daemon restarts too.
* the runtime's events for turns in the channel (``memory_context``,
  ``history_context``, ``token_delta``, ``tool_call``, ``tool_result``, ``done``,
  ``error``), live only, without ids, each tagged with persona, request id and
  user message id; what is private to the speaking user (the text of their
  user-scoped memories) is withheld (:mod:`agentd.api.redact`).

Before a ``memory_context``, ``done`` or ``error`` is sent, the store is read for
new messages, so a user message comes before its turn's events and a reply
before its ``done``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from anyio import to_thread

from agentd._exceptions import ErrorCode
from agentd.api.redact import for_followers
from agentd.api.sse import KEEPALIVE, frame
from agentd.log import get_logger
from agentd.runtime import Done, Error, Event, MemoryContext
from agentd.runtime.messages import Turn
from agentd.store import Store
from agentd.store.messages import Message

log = get_logger("agentd.api.feed")

#: Events a subscriber may fall behind by before its stream is ended (it can resume).
QUEUE_LIMIT = 10_000
#: Messages read from the store per query.
PAGE = 200


@dataclass(frozen=True)
class _Live:
    """A runtime event for one channel's subscribers."""

    event: Event
    payload: dict[str, Any]


_WAKE = object()
_CLOSE = object()


class ChannelHub:
    """Subscriptions to channel feeds; fed by a runtime listener from actor threads."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: dict[str, set[asyncio.Queue[object]]] = {}
        self._closed = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver events on ``loop`` (the server's)."""
        self._loop = loop

    # -- producers ---------------------------------------------------------------------

    def listener(self, turn: Turn, event: Event) -> None:
        """The runtime listener: called on an actor thread for every event of every turn."""
        loop = self._loop
        if loop is None or turn.channel not in self._subscribers:
            return
        payload = {
            **for_followers(event),
            "persona": turn.persona,
            "channel": turn.channel,
            "request_id": turn.request_id,
            "user_message_id": turn.message_id,
        }
        try:
            loop.call_soon_threadsafe(self._publish, turn.channel, _Live(event, payload))
        except RuntimeError:  # loop closed during shutdown
            pass

    def wake(self, channel: str) -> None:
        """A message was stored in ``channel``: subscribers read the store (call on the loop)."""
        self._publish(channel, _WAKE)

    def close(self) -> None:
        """End every stream (shutdown); call on the loop."""
        self._closed = True
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(_CLOSE)

    def _publish(self, channel: str, item: object) -> None:
        for queue in list(self._subscribers.get(channel, ())):
            if queue.qsize() >= QUEUE_LIMIT:
                # Too slow a reader: end its stream rather than grow without bound; it resumes by id.
                self._drop(channel, queue)
                queue.put_nowait(_CLOSE)
                continue
            queue.put_nowait(item)

    def _drop(self, channel: str, queue: asyncio.Queue[object]) -> None:
        queues = self._subscribers.get(channel)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subscribers[channel]

    # -- reading -------------------------------------------------------------------------

    def messages_after(self, channel: str, after: int, limit: int = PAGE) -> list[Message]:
        """Stored messages of ``channel`` after id ``after``, oldest first (blocking)."""
        with self._store.read() as conn:
            return self._store.messages.after(conn, channel, after, limit)

    def last_id(self, channel: str) -> int:
        """The newest message id of ``channel`` (0 when it has none; blocking)."""
        with self._store.read() as conn:
            newest = self._store.messages.recent(conn, channel, 1)
        return newest[0].id if newest else 0

    async def stream(self, channel: str, after: int | None, keepalive: float = 15.0) -> AsyncIterator[bytes]:
        """SSE frames for ``channel``: stored messages after ``after`` (default: from now), then live."""
        if self._closed:
            yield frame(
                "error", {"code": ErrorCode.SHUTTING_DOWN, "message": "agentd is shutting down; reconnect later"}
            )
            return
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._subscribers.setdefault(channel, set()).add(queue)  # subscribe first: nothing falls in a gap
        try:
            last = after if after is not None else await to_thread.run_sync(self.last_id, channel)
            yield b"retry: 1000\n\n"
            catch_up = True
            while True:
                while catch_up:  # read the store for messages after the last one sent
                    page = await to_thread.run_sync(self.messages_after, channel, last)
                    for msg in page:
                        last = msg.id
                        yield frame("message", msg.as_json(), msg.id)
                    catch_up = len(page) >= PAGE
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=keepalive)
                except TimeoutError:
                    yield KEEPALIVE
                    continue
                if item is _CLOSE:
                    if not self._closed:
                        yield frame(
                            "error",
                            {
                                "code": ErrorCode.FEED_OVERFLOW,
                                "message": "this reader fell too far behind; reconnect with Last-Event-ID",
                            },
                        )
                    return
                if item is _WAKE:
                    catch_up = True
                    continue
                assert isinstance(item, _Live)
                if isinstance(item.event, MemoryContext | Done | Error):
                    # Its user message (or its reply) is stored by now: send it first.
                    page = await to_thread.run_sync(self.messages_after, channel, last)
                    for msg in page:
                        last = msg.id
                        yield frame("message", msg.as_json(), msg.id)
                    catch_up = len(page) >= PAGE
                yield frame(item.event.type, item.payload)
        finally:
            self._drop(channel, queue)
