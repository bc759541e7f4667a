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

Fan-out is paid once per event, not once per follower: a live event is encoded
once (on the actor's thread, off the event loop), and new messages are read from
the store once per channel (:meth:`ChannelHub.wake`, :meth:`ChannelHub.fetch`)
and encoded once; every follower takes the frames past its own position. A
follower whose position is behind what was read (it just connected) reads the
store itself, once, and then follows the shared reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from anyio import to_thread

from agentd._exceptions import ErrorCode, ShuttingDown, TooManyFollowers
from agentd.api.redact import for_followers
from agentd.api.sse import KEEPALIVE, frame
from agentd.observe.log import get_logger
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
    """A runtime event for one channel's subscribers, encoded once for all of them."""

    event: Event
    data: bytes


@dataclass(frozen=True)
class _Read:
    """Messages of a channel read once for all its subscribers: every message with
    ``after < id <= upto``, encoded (``(id, frame)``, oldest first)."""

    after: int
    upto: int
    frames: tuple[tuple[int, bytes], ...]


_WAKE = object()
_CLOSE = object()


class ChannelHub:
    """Subscriptions to channel feeds; fed by a runtime listener from actor threads."""

    def __init__(self, store: Store, per_channel: int = 256, per_key: int = 512) -> None:
        self._store = store
        self._per_channel = per_channel
        self._per_key = per_key
        #: Event streams open per key (the caller's key name; the local admin's too).
        self._by_key: dict[str, int] = {}
        #: Streams that are not channel feeds (``GET /mcp``), per channel they act in, and how
        #: to end each at shutdown.
        self._held: dict[str, int] = {}
        self._stops: set[Callable[[], None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: dict[str, set[asyncio.Queue[object]]] = {}
        self._closed = False
        #: Per channel: how far the shared reads have got, and the read running (one at a time).
        self._read_upto: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Per channel: the last turn event being delivered (each waits for the one before).
        self._chain: dict[str, asyncio.Task[None]] = {}

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
        live = _Live(event, frame(event.type, payload))  # encoded here, once, off the event loop
        try:
            loop.call_soon_threadsafe(self._publish_live, turn.channel, live)
        except RuntimeError:  # loop closed during shutdown
            pass

    def wake(self, channel: str) -> None:
        """A message was stored in ``channel``: read the new messages once for every subscriber
        (call on the loop)."""
        if channel not in self._subscribers:
            return
        if channel not in self._read_upto:
            self._publish(channel, _WAKE)  # no shared position yet: each reads for itself
            return
        asyncio.get_running_loop().create_task(self._read_shared(channel))

    async def _read_shared(self, channel: str) -> None:
        """Read the channel's messages past the shared position, once, and hand them to every subscriber."""
        lock = self._locks.setdefault(channel, asyncio.Lock())
        async with lock:
            try:
                while True:
                    after = self._read_upto.get(channel)
                    if after is None or channel not in self._subscribers:
                        return
                    page = await to_thread.run_sync(self.messages_after, channel, after)
                    if not page:
                        return
                    frames = tuple((m.id, frame("message", m.as_json(), m.id)) for m in page)
                    if self._read_upto.get(channel) == after:
                        self._read_upto[channel] = page[-1].id
                    self._publish(channel, _Read(after, page[-1].id, frames))
                    if len(page) < PAGE:
                        return
            except Exception as exc:  # a store error: each follower reads for itself instead
                log.warning("feed_read_failed", channel=channel, error=repr(exc))
                self._publish(channel, _WAKE)

    def _publish_live(self, channel: str, live: _Live) -> None:
        """Hand a turn's event to the channel's subscribers, in order; before a ``memory_context``,
        ``done`` or ``error``, the messages stored so far (its user message, its reply)."""
        previous = self._chain.get(channel)
        task = asyncio.get_running_loop().create_task(self._deliver(channel, live, previous))
        self._chain[channel] = task

    async def _deliver(self, channel: str, live: _Live, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            if isinstance(live.event, MemoryContext | Done | Error) and channel in self._read_upto:
                await self._read_shared(channel)
            self._publish(channel, live)
        finally:
            if self._chain.get(channel) is asyncio.current_task():
                del self._chain[channel]

    def close(self) -> None:
        """End every stream (shutdown), the held ones too; call on the loop."""
        self._closed = True
        for stop in list(self._stops):
            stop()
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
                self._read_upto.pop(channel, None)
                self._locks.pop(channel, None)

    # -- reading -------------------------------------------------------------------------

    def admit(self, channel: str, key: str) -> None:
        """Raise :class:`TooManyFollowers` when ``channel`` or ``key`` follows as many streams as it may."""
        if len(self._subscribers.get(channel, ())) + self._held.get(channel, 0) >= self._per_channel:
            raise TooManyFollowers(
                f"channel {channel!r} has {self._per_channel} event streams open, as many as it may "
                "([daemon] max_followers_per_channel)"
            )
        if self._by_key.get(key, 0) >= self._per_key:
            raise TooManyFollowers(
                f"this key has {self._per_key} event streams open, as many as it may ([daemon] max_followers_per_key)"
            )

    @contextmanager
    def hold(self, channel: str, key: str, stop: Callable[[], None]) -> Iterator[None]:
        """Count an event stream that is not a channel feed (``GET /mcp``) against the same limits
        while it is open: raises :class:`TooManyFollowers` past ``[daemon] max_followers_per_channel``
        or ``max_followers_per_key`` (feeds and held streams together), :class:`ShuttingDown` once
        closed; ``stop`` ends the stream when the daemon shuts down (:meth:`close`)."""
        if self._closed:
            raise ShuttingDown("agentd is shutting down; reconnect later")
        self.admit(channel, key)
        self._held[channel] = self._held.get(channel, 0) + 1
        self._by_key[key] = self._by_key.get(key, 0) + 1
        self._stops.add(stop)
        try:
            yield
        finally:
            self._stops.discard(stop)
            for counts, name in ((self._held, channel), (self._by_key, key)):
                left = counts.get(name, 1) - 1
                if left:
                    counts[name] = left
                else:
                    counts.pop(name, None)

    def messages_after(self, channel: str, after: int, limit: int = PAGE) -> list[Message]:
        """Stored messages of ``channel`` after id ``after``, oldest first (blocking)."""
        with self._store.read() as conn:
            return self._store.messages.after(conn, channel, after, limit)

    def last_id(self, channel: str) -> int:
        """The newest message id of ``channel`` (0 when it has none; blocking)."""
        with self._store.read() as conn:
            newest = self._store.messages.recent(conn, channel, 1)
        return newest[0].id if newest else 0

    async def stream(
        self, channel: str, after: int | None, keepalive: float = 15.0, key: str = ""
    ) -> AsyncIterator[bytes]:
        """SSE frames for ``channel``: stored messages after ``after`` (default: from now), then live.
        ``key``: whose stream it is (counted against ``[daemon] max_followers_per_key``)."""
        if self._closed:
            yield frame(
                "error", {"code": ErrorCode.SHUTTING_DOWN, "message": "agentd is shutting down; reconnect later"}
            )
            return
        try:
            self.admit(channel, key)  # again: others may have started following since the route checked
        except TooManyFollowers as exc:
            yield frame("error", {"code": exc.code, "message": exc.message})
            return
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._subscribers.setdefault(channel, set()).add(queue)  # subscribe first: nothing falls in a gap
        self._by_key[key] = self._by_key.get(key, 0) + 1
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
                    if not catch_up:
                        # Caught up: the shared reads go on from here (or from where they already are).
                        self._read_upto.setdefault(channel, last)
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
                if isinstance(item, _Read):
                    if item.after > last:
                        catch_up = True  # read past a gap of its own: read the store itself
                        continue
                    for mid, data in item.frames:
                        if mid > last:
                            last = mid
                            yield data
                    continue
                assert isinstance(item, _Live)
                if isinstance(item.event, MemoryContext | Done | Error) and channel not in self._read_upto:
                    # Its user message (or its reply) is stored by now: send it first (the hub read
                    # it for everyone before this event when it follows the channel itself).
                    page = await to_thread.run_sync(self.messages_after, channel, last)
                    for msg in page:
                        last = msg.id
                        yield frame("message", msg.as_json(), msg.id)
                    catch_up = len(page) >= PAGE
                yield item.data
        finally:
            self._drop(channel, queue)
            left = self._by_key.get(key, 1) - 1
            if left:
                self._by_key[key] = left
            else:
                self._by_key.pop(key, None)
