"""Running the daemon: uvicorn on a bound socket, and a shutdown that loses nothing.

On SIGTERM/SIGINT (or ``should_exit``) the server stops listening at once, then
the runtime stops: replies in flight may finish within
``daemon.shutdown_grace_seconds``, the rest are stored as ``interrupted``, and
messages not yet started stay ``pending`` for the next start. Requests still
waiting on the embedder are answered (503), streams end, remaining connections
close, and the database is closed last.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import uvicorn
from anyio import to_thread

from agentd.api.app import create_api
from agentd.api.connections import default_max_connections, guarded_h11
from agentd.api.feed import ChannelHub
from agentd.api.listen import bind_socket
from agentd.api.preflight import check_startup
from agentd.api.schemas import HTTP_LINE_LIMIT
from agentd.api.state import Daemon
from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.observe.log import get_logger
from agentd.runtime import Runtime
from agentd.store.walkeeper import WalKeeper

log = get_logger("agentd.serve")

#: After the runtime has stopped, how long open connections get to finish.
CONNECTION_GRACE_SECONDS = 3


class _Server(uvicorn.Server):
    """uvicorn, with agentd's drain step between "stop listening" and "close connections"."""

    def __init__(
        self, config: uvicorn.Config, drain: Callable[[], None], hub: ChannelHub, release: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._hub = hub
        self._release = release
        self._signal: str | None = None
        self._original_handlers: dict[int, Any] | None = None

    def install_signal_handlers(self) -> None:
        """From now on SIGTERM/SIGINT start the graceful shutdown (on the main thread only; once).

        ``agentd serve`` calls it before it says it listens, so a signal sent as soon as it
        does is a graceful stop, not the default handler's abrupt death."""
        if self._original_handlers is None and threading.current_thread() is threading.main_thread():
            self._original_handlers = {
                sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
            }

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT start the graceful shutdown; unlike uvicorn's own, the signal is not
        raised again afterwards, so the database is closed and the exit status is 0."""
        self.install_signal_handlers()
        try:
            yield
        finally:
            original, self._original_handlers = self._original_handlers, None
            for sig, handler in (original or {}).items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Note the signal, then let uvicorn begin shutting down (a second Ctrl-C forces it).

        Nothing is logged here: the handler runs on the main thread between two of its
        bytecodes, possibly while that thread holds the log's lock in the middle of writing a
        line, and would wait for that lock forever. :meth:`shutdown` logs the signal."""
        if not self.should_exit:
            self._signal = signal.Signals(sig).name
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop listening, drain the runtime (off the loop), end the event streams, then let
        uvicorn close the connections left and run the lifespan shutdown."""
        if self._signal is not None:
            log.info("shutdown_requested", signal=self._signal)
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        await to_thread.run_sync(self._drain)
        # Requests still waiting on a hung embedder are answered now (503 shutting_down), so
        # no request is left for uvicorn to cancel.
        self._release()
        self._hub.close()
        await super().shutdown(sockets=None)


class DaemonServer:
    """The runtime, the API and uvicorn, over one :class:`App`.

    ``run()`` blocks until shutdown (signals are handled when it runs on the main
    thread); ``request_stop()`` asks for the same shutdown from any thread.
    """

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        *,
        llm: ChatModel | None = None,
        resume_pending: bool | None = None,
        sock: socket.socket | None = None,
        workers: int = 0,
    ) -> None:
        """``sock``: a socket already listening on ``host:port`` (``agentd serve`` binds first).
        ``workers``: answer turns in that many worker processes (``agentd serve`` passes
        ``[runtime] workers``; see :mod:`agentd.runtime.scaleout.workers`)."""
        cfg = app.config
        check_startup(app, host)  # as agentd doctor checks it
        self.app = app
        self.sock = sock if sock is not None else bind_socket(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.runtime = Runtime(app, llm, workers=workers)
        self.hub = ChannelHub(app.store, cfg.daemon.max_followers_per_channel, cfg.daemon.max_followers_per_key)
        #: Keeps the WAL small while the daemon runs (SQLite; [database] checkpoint_seconds).
        self.wal = WalKeeper(app.store, cfg.database.checkpoint_seconds)
        self._stopped = threading.Lock()
        self._runtime_stopped = False
        api = create_api(Daemon(app, self.runtime, self.hub), resume_pending=resume_pending, bind_host=host)
        # The event loop and HTTP parser are named, not "auto": what else happens to be
        # installed (httptools) must not change how the daemon drains and stops. The loop is
        # uvloop (a dependency wherever it runs: not on Windows): its own work per request costs
        # about a third less CPU than asyncio's, CPU the turns need (docs/notes/throughput.md).
        config = uvicorn.Config(
            api,
            log_config=None,
            access_log=False,
            lifespan="on",
            loop="asyncio" if sys.platform == "win32" else "uvloop",
            # uvicorn's h11 protocol, with deadlines for reading a request and a bound on connections.
            http=guarded_h11(
                cfg.daemon.header_timeout_seconds,
                cfg.daemon.body_timeout_seconds,
                cfg.daemon.max_connections or default_max_connections(),
            ),
            timeout_graceful_shutdown=CONNECTION_GRACE_SECONDS,
            # Room for every query string the schema allows (see agentd.api.schemas).
            h11_max_incomplete_event_size=HTTP_LINE_LIMIT,
        )
        self.server = _Server(config, self._stop_runtime, self.hub, self._stop_waiting)

    @property
    def url(self) -> str:
        """The base URL clients use."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve until stopped, then stop the runtime and close the database."""
        self.wal.start()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self._stop_runtime()
            self.wal.stop()
            self.sock.close()
            self.app.close()
            log.info("stopped")

    def handle_signals(self) -> None:
        """SIGTERM/SIGINT stop the daemon gracefully from now on, before :meth:`run` (main thread)."""
        self.server.install_signal_handlers()

    def request_stop(self) -> None:
        """Begin the graceful shutdown (thread-safe)."""
        self.server.should_exit = True

    @property
    def started(self) -> bool:
        """True once the server accepts requests."""
        return bool(self.server.started)

    def _stop_waiting(self) -> None:
        embedder = self.app.embedder if self.app.config.embedding.provider != "none" else None
        if embedder is not None:
            embedder.close()

    def _stop_runtime(self) -> None:
        with self._stopped:
            if self._runtime_stopped:
                return
            self._runtime_stopped = True
        grace = self.app.config.daemon.shutdown_grace_seconds
        log.info("draining", grace_s=grace)
        self.runtime.stop(grace)
