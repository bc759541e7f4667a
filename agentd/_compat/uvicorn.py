"""uvicorn's HTTP/1.1 protocol (h11), with what agentd reads of its private state behind stable names.

agentd.api.connections closes connections that never finish a request and bounds their number.
uvicorn offers no setting for that (0.54: ``timeout_keep_alive`` starts only after a response,
``limit_concurrency`` answers 503 and closes nothing; a probe of an idle connection, half a
header and a short body with ``timeout_keep_alive = 1`` found all three open after 4 s), so it
subclasses uvicorn's protocol; every private name it relies on is read here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: What :class:`HookedH11` relies on, each checked by :func:`broken`.
ASSUMPTIONS = {
    "hooks": "H11Protocol calls connection_made, data_received, on_response_complete and connection_lost",
    "conn": "an H11Protocol keeps its h11.Connection in .conn (the peer's state: .conn.their_state)",
    "cycle": "an H11Protocol keeps the request being answered in .cycle (None before the first), "
    "with .response_complete",
    "connections": "an H11Protocol keeps every open connection of the server in .connections (a set)",
    "loop": "an H11Protocol keeps its event loop in .loop, its transport in .transport, its peer in .client",
}


class HookedH11(H11Protocol):
    """uvicorn's h11 protocol; subclasses override its hooks (``connection_made``, ``data_received``,
    ``on_response_complete``, ``connection_lost``) and read its state through these properties."""

    @property
    def peer_state(self) -> object:
        """h11's state of the client's side (``h11.IDLE``, ``h11.SEND_BODY``, ...)."""
        return self.conn.their_state

    @property
    def answered_last_request(self) -> bool:
        """No request yet, or the last one's response is complete."""
        return self.cycle is None or bool(self.cycle.response_complete)

    @property
    def open_connections(self) -> set[Any]:
        """Every connection of this server now open (the protocol instances)."""
        return self.connections

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the connection runs on."""
        return self.loop

    @property
    def peer(self) -> tuple[str, int] | None:
        """The client's address."""
        return self.client

    def close_transport(self) -> None:
        """Close the connection (unless it is closing already)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    @property
    def closing(self) -> bool:
        """Whether the connection is gone or going."""
        return self.transport is None or self.transport.is_closing()


def broken() -> list[str]:
    """The :data:`ASSUMPTIONS` the installed uvicorn breaks, each named (empty: all hold)."""
    import uvicorn
    from uvicorn.server import ServerState

    failed = [
        ASSUMPTIONS["hooks"]
        for hook in ("connection_made", "data_received", "on_response_complete", "connection_lost")
        if not callable(getattr(H11Protocol, hook, None))
    ]
    loop = asyncio.new_event_loop()
    try:
        state = ServerState()

        async def app(scope: Any, receive: Any, send: Any) -> None:  # never called
            raise AssertionError

        protocol = H11Protocol(uvicorn.Config(app, log_config=None), state, {}, loop)
        checks = {
            "conn": isinstance(getattr(protocol, "conn", None), h11.Connection),
            "cycle": hasattr(protocol, "cycle") and protocol.cycle is None,
            "connections": getattr(protocol, "connections", None) is state.connections,
            "loop": getattr(protocol, "loop", None) is loop
            and hasattr(protocol, "transport")
            and hasattr(protocol, "client"),
        }
        failed += [ASSUMPTIONS[name] for name, holds in checks.items() if not holds]
        if checks["conn"] and protocol.conn.their_state is not h11.IDLE:
            failed.append(ASSUMPTIONS["conn"])
    finally:
        loop.close()
    return failed
