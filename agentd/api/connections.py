"""Connections the server keeps: bounded in time while they send a request, and in number.

uvicorn closes a connection idle *after* a response (``timeout_keep_alive``),
but never one that has not finished sending a request: a connection that sends
nothing, half a header, or a body shorter than its ``Content-Length`` stays
open for ever, and a few thousand of them take every file descriptor, so
``/healthz`` stops answering. No key is needed to open a connection.
:func:`guarded_h11` makes uvicorn's own HTTP/1.1 protocol (h11) close (its private state is read
through :mod:`agentd._compat.uvicorn`, which says why no uvicorn setting does this):

- a connection whose request line and headers are not complete within
  ``header_timeout`` seconds of it opening (or of the previous response);
- a connection whose body is not complete within ``body_timeout`` seconds of
  its headers (the route waiting for it sees the client gone);

and keeps at most ``max_connections`` open: past it, the connection that has
waited longest without sending a complete request is closed to make room (a
client with a request in flight or a followed event stream is never the one
closed); when every connection is busy, the new one is closed. The default
bound leaves room under the process's open-file limit for the database,
models and logs (:func:`default_max_connections`).

(A request framed by both ``Content-Length`` and ``Transfer-Encoding`` is
refused at the door: :class:`agentd.api.body.Framing`.)
"""

from __future__ import annotations

import asyncio
import itertools
import resource
from typing import Any

import h11

from agentd._compat.uvicorn import HookedH11
from agentd.observe.log import get_logger

log = get_logger("agentd.api")

#: File descriptors kept for everything but client connections (database, models, logs, pipes).
RESERVED_FDS = 256
#: The fewest connections the default bound allows, whatever the open-file limit says.
MIN_CONNECTIONS = 64


def default_max_connections() -> int:
    """Connections that fit under this process's open-file limit (``ulimit -n``) with
    :data:`RESERVED_FDS` to spare, and at least :data:`MIN_CONNECTIONS`."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65_536
    return max(MIN_CONNECTIONS, int(soft) - RESERVED_FDS)


#: The order connections began waiting for a request in (the loop's clock ties within one iteration).
_ORDER = itertools.count()


class _Guarded(HookedH11):
    """uvicorn's h11 protocol with the bounds of the module docstring (set on subclasses)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._timing: str = ""  # "headers" | "body" | ""
        self._waiting_since = 0

    # -- uvicorn's hooks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._sync_timer()
        if len(self.open_connections) > self.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._sync_timer()

    def on_response_complete(self) -> None:
        self._cancel_timer()  # the next request gets its own deadline
        super().on_response_complete()
        self._sync_timer()

    # -- the bounds ------------------------------------------------------------------

    def _sync_timer(self) -> None:
        """Arm the deadline of what the connection is sending now (once per request part)."""
        if self.closing:
            return
        state = self.peer_state
        if state is h11.IDLE and self.answered_last_request:
            want, delay = "headers", self.header_timeout
        elif state is h11.SEND_BODY:
            want, delay = "body", self.body_timeout
        else:
            want, delay = "", 0.0
        if want == self._timing:
            return
        self._cancel_timer()
        if want:
            self._timing = want
            if want == "headers":
                self._waiting_since = next(_ORDER)
            self._timer = self.event_loop.call_later(delay, self._timed_out)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timing = ""

    def _timed_out(self) -> None:
        what, self._timer = self._timing, None
        if self.closing:
            return
        log.info("connection_timed_out", waiting_for=what, client=_client(self.peer))
        self.close_transport()

    @property
    def _idle(self) -> bool:
        return self._timing == "headers"

    def _make_room(self) -> None:
        """Close the connection that has waited longest for a request, or this one if none waits."""
        waiting = [c for c in self.open_connections if isinstance(c, _Guarded) and c is not self and c._idle]
        if not waiting:
            log.warning("connection_refused", reason="max_connections", limit=self.max_connections)
            self.close_transport()
            return
        oldest = min(waiting, key=lambda c: c._waiting_since)
        oldest._cancel_timer()
        oldest.close_transport()


def _client(address: tuple[str, int] | None) -> str:
    return f"{address[0]}:{address[1]}" if address else ""


def guarded_h11(header_timeout: float, body_timeout: float, max_connections: int) -> type[HookedH11]:
    """uvicorn's h11 protocol class, bounded as the module docstring says."""
    return type(
        "GuardedH11Protocol",
        (_Guarded,),
        {"header_timeout": header_timeout, "body_timeout": body_timeout, "max_connections": max_connections},
    )
