"""Server-sent events: the wire format, and the bridge from actor threads to asyncio.

A turn's events are produced on an actor thread; :class:`EventBridge` hands each
one to the event loop with ``loop.call_soon_threadsafe`` (never blocking the
actor), and the response generator awaits them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agentd.runtime import Done, Error, Event

MEDIA_TYPE = "text/event-stream"
#: Sent on idle streams so proxies and clients keep the connection open.
KEEPALIVE = b": keep-alive\n\n"
#: Headers of every event stream (no caching, no proxy buffering).
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


#: Characters JSON leaves raw that some readers take for line breaks (Python's
#: ``str.splitlines``, behind httpx's ``iter_lines``, splits on them): escaped, so
#: one event's ``data:`` is always one line whatever text it carries.
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_LINE_BREAK = re.compile("[\x85\u2028\u2029]")


def frame(event: str, data: Any, event_id: int | None = None) -> bytes:
    """One SSE frame: ``id:`` (durable events only), ``event:`` and one line of JSON ``data:``.

    JSON escapes CR, LF and the other control characters; the Unicode line and
    paragraph separators (and NEL) are escaped here.
    """
    head = f"id: {event_id}\n" if event_id is not None else ""
    text = _LINE_BREAK.sub(lambda m: _LINE_BREAKS[m.group()], json.dumps(data, ensure_ascii=False))
    return f"{head}event: {event}\ndata: {text}\n\n".encode()


class EventBridge:
    """Receives a turn's events on any thread; yields them as SSE frames on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Event] = asyncio.Queue()

    def sink(self, event: Event) -> None:
        """The runtime's sink (called from an actor thread)."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the loop is closed: the daemon is gone, the reply is stored anyway
            pass

    async def events(self, keepalive: float = 15.0) -> AsyncIterator[Event | None]:
        """The turn's events until its ``done`` or ``error``; ``None`` after ``keepalive``
        idle seconds (time to send a keep-alive)."""
        while True:
            try:
                event = await asyncio.wait_for(self._queue.get(), timeout=keepalive)
            except TimeoutError:
                yield None
                continue
            yield event
            if isinstance(event, Done | Error):
                return

    async def frames(self, keepalive: float = 15.0) -> AsyncIterator[bytes]:
        """Frames until the turn's ``done`` or ``error``."""
        async for event in self.events(keepalive):
            yield KEEPALIVE if event is None else frame(event.type, event.as_json())
